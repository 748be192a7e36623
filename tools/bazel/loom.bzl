"""Compiler options and rule wrappers shared by every loom target."""

# x86-64-v3 (AVX2 + FMA) rather than -march=native: binaries built here also run
# on the GPU machine, whose CPU may lack this machine's AVX-512.
LOOM_COPTS = [
    "-std=c++17",
    "-march=x86-64-v3",
    "-fopenmp",  # Eigen's GEMM and loom's parallel_for use OpenMP threads
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",
    "-Wno-sign-compare",
]

LOOM_LINKOPTS = ["-fopenmp", "-pthread"]

def loom_cc_library(name, copts = [], linkopts = [], **kwargs):
    native.cc_library(
        name = name,
        copts = LOOM_COPTS + copts,
        linkopts = LOOM_LINKOPTS + linkopts,
        linkstatic = True,
        **kwargs
    )

def loom_cc_binary(name, copts = [], linkopts = [], **kwargs):
    native.cc_binary(
        name = name,
        copts = LOOM_COPTS + copts,
        linkopts = LOOM_LINKOPTS + linkopts,
        **kwargs
    )

def loom_cc_test(name, copts = [], linkopts = [], deps = [], **kwargs):
    """A GoogleTest binary; its main() is tests/test_main.cc (GPU skip banner)."""
    native.cc_test(
        name = name,
        copts = LOOM_COPTS + copts,
        linkopts = LOOM_LINKOPTS + linkopts,
        deps = deps + ["//tests:test_main"],
        linkstatic = True,
        **kwargs
    )
