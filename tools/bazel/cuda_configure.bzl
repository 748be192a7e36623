"""cuda_configure: finds the CUDA toolkit (CUDA_PATH, else /usr/local/cuda).

It writes @local_cuda with
  defs.bzl   CUDA_FOUND (bool) and NVCC (path), read by //:BUILD and cuda.bzl;
  BUILD      :cuda_runtime, the headers and libraries the CUDA backend links
             (cudart, cuBLAS, cuDNN, NCCL), or an empty library when not found.
A machine without a toolkit builds the CPU backend only.
"""

# The libraries the CUDA backend links; the installed CMake and pkg-config
# files name them too (//:dist).
CUDA_LIBS = ["cudart", "cublas", "cublasLt", "cudnn", "nccl"]

def _cuda_configure_impl(ctx):
    root = ctx.os.environ.get("CUDA_PATH", "/usr/local/cuda")
    nvcc = ctx.path(root + "/bin/nvcc")
    found = nvcc.exists and ctx.path(root + "/include/cuda_runtime.h").exists
    ctx.file("WORKSPACE", "workspace(name = \"%s\")\n" % ctx.name)
    if found:
        ctx.symlink(root + "/include", "include")
        ctx.file("BUILD", """
cc_library(
    name = "cuda_runtime",
    # cuda_fp16.h (included by cuBLAS and cuDNN headers) needs <nv/target>,
    # which CUDA 13 ships under include/cccl without a file extension.
    hdrs = glob(["include/**/*.h", "include/**/*.hpp", "include/**/*.cuh", "include/cccl/nv/**"]),
    includes = ["include", "include/cccl"],
    linkopts = ["-L{root}/lib64", "-Wl,-rpath,{root}/lib64"] + {libs},
    visibility = ["//visibility:public"],
)
""".format(root = root, libs = repr(["-l" + lib for lib in CUDA_LIBS])))
    else:
        ctx.file("BUILD", """
cc_library(
    name = "cuda_runtime",
    visibility = ["//visibility:public"],
)
""")
    ctx.file("defs.bzl", "CUDA_FOUND = %s\nCUDA_ROOT = %r\nNVCC = %r\n" %
                         (found, root, str(nvcc) if found else ""))

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["CUDA_PATH"],
    local = True,
)
