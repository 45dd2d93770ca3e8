"""Wiring only: the six roles and the routers between them.

``builder`` and ``graph`` are exported without a checkpointer (LangGraph Studio brings its own);
the CLI and evals call ``builder.compile(checkpointer=...)``.
"""

from __future__ import annotations

from langgraph.graph import START, StateGraph

from kernelskill.graph.context import Context
from kernelskill.graph.routing import route_after_planner, route_after_review
from kernelskill.graph.state import InputState, OutputState, State
from kernelskill.nodes.diagnoser import diagnoser
from kernelskill.nodes.feature_extractor import feature_extractor
from kernelskill.nodes.generator import generator
from kernelskill.nodes.optimizer import optimizer
from kernelskill.nodes.planner import planner
from kernelskill.nodes.reviewer import reviewer

builder = StateGraph(State, context_schema=Context, input_schema=InputState, output_schema=OutputState)
builder.add_node("generator", generator)
builder.add_node("reviewer", reviewer)
builder.add_node("diagnoser", diagnoser)
builder.add_node("feature_extractor", feature_extractor)
builder.add_node("planner", planner)
builder.add_node("optimizer", optimizer)

builder.add_edge(START, "generator")
builder.add_edge("generator", "reviewer")
builder.add_conditional_edges("reviewer", route_after_review)
builder.add_edge("diagnoser", "reviewer")
builder.add_edge("feature_extractor", "planner")
builder.add_conditional_edges("planner", route_after_planner)
builder.add_edge("optimizer", "reviewer")

graph = builder.compile()
graph.name = "kernelskill"
