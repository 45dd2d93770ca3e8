from kernelskill.nodes.feature_extractor import extract_features

POINTWISE = """
import torch, triton
import triton.language as tl

@triton.jit
def k(x, o, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o + offs, tl.exp(tl.load(x + offs, mask=m)), mask=m)

class ModelNew(torch.nn.Module):
    def forward(self, x):
        o = torch.empty_like(x)
        k[(1,)](x, o, x.numel(), BLOCK=1024)
        return o
"""

MATMUL = """
import torch, triton
import triton.language as tl

@triton.autotune(configs=[triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64})], key=["M"])
@triton.jit
def mm(a, b, c, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k in range(0, K, BLOCK_K):
        acc += tl.dot(tl.load(a), tl.load(b))
    tl.store(c, acc)

class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        c = torch.empty(1)
        mm[(1,)](a, b, c, 1, 1, 1)
        return torch.relu(c) + a @ b
"""


def test_pointwise_features():
    f = extract_features(POINTWISE)
    assert f["num_kernels"] == 1 and f["num_launch_sites"] == 1
    assert f["is_pointwise"] and not f["uses_dot"] and not f["has_reduction"]
    assert f["has_masks"] and f["uses_transcendentals"]
    assert f["num_loads"] == 1 and f["num_stores"] == 1 and f["max_block_size"] == 1024
    assert f["num_constexpr_params"] == 1 and f["torch_ops_in_forward"] == 0


def test_matmul_features():
    f = extract_features(MATMUL)
    assert f["uses_dot"] and f["has_loops"] and f["uses_autotune"] and not f["is_pointwise"]
    assert f["max_block_size"] == 128 and f["num_constexpr_params"] == 3
    assert f["torch_ops_in_forward"] == 2  # torch.relu and the @ matmul


def test_unparseable_source():
    assert "parse_error" in extract_features("def broken(:")


def test_conv_dot_kernel_is_a_convolution_kernel_that_calls_dot():
    conv = """
import triton
import triton.language as tl

@triton.jit
def conv2d_kernel(x, w, y, K: tl.constexpr):
    acc = tl.dot(tl.load(x), tl.load(w))
    tl.store(y, acc)

@triton.jit
def triton_poi_fused_convolution_0(x, y):
    tl.store(y, tl.load(x) + 1)
"""
    assert extract_features(conv)["conv_dot_kernel"] is True
    pointwise_only = conv.replace("def conv2d_kernel", "def gemm_kernel")
    assert extract_features(pointwise_only)["conv_dot_kernel"] is False  # a pointwise kernel named for a conv
