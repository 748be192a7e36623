"""cuda_library: C++ and CUDA sources in one cc_library, built only with CUDA.

Bazel 4 has no CUDA rules, so each `.cu` file becomes a genrule that runs nvcc
(`-c -Xcompiler -fPIC -std=c++17 -O3`, one target: sm_90 for H100/H200) and the
objects join the `.cc` files of an ordinary cc_library:

    cuda_library(
        name = "cuda",
        srcs = ["stream.cc"],          # host C++, compiled by gcc with the CUDA headers
        cu_srcs = ["elementwise.cu"],  # compiled by nvcc
        hdrs = ["stream.h"],
        cu_hdrs = ["loops.cuh"],       # private headers the .cu files include
        cu_deps = ["//tensor:core_headers"],  # other headers they include
        deps = ["//tensor:core"],
    )

Where the toolkit is missing (CUDA_FOUND is False) or the build says
`--//:cuda=false`, the library is empty and no nvcc action exists in the
graph: the genrules are tagged `manual`, so `bazel build //...` skips them
unless a CUDA-enabled build needs their objects. The library is `alwayslink`
so that the backend's static registration object is linked even though no
symbol of it is referenced.

In `-c dbg` builds nvcc gets `-g -lineinfo` and no `-DNDEBUG`, which turns on
the per-launch synchronising checks of tensor/cuda/launch.h.
"""

load("@local_cuda//:defs.bzl", "CUDA_FOUND", "CUDA_ROOT", "NVCC")
load("//tools/bazel:loom.bzl", "LOOM_COPTS", "LOOM_LINKOPTS")

# One real target: H100 and H200 are compute capability 9.0. Each extra
# -gencode costs a full device compile of every .cu file on CI's two cores.
NVCC_FLAGS = [
    "-std=c++17",
    "-O3",
    "-Xcompiler=-fPIC",
    "-gencode=arch=compute_90,code=sm_90",
    "--expt-relaxed-constexpr",
    # Kernel-size report in the build log (registers, spills): free to read.
    "-Xptxas=-warn-spills",
]

def _object_name(src):
    return src[:-len(".cu")].replace("/", "_")

def cuda_library(
        name,
        srcs = [],
        cu_srcs = [],
        hdrs = [],
        cu_hdrs = [],
        cu_deps = [],
        nvcc_flags = {},
        deps = [],
        copts = [],
        linkopts = [],
        **kwargs):
    """A cc_library of host sources plus nvcc-compiled objects.

    Args:
      name: the cc_library's name.
      srcs: host C++ sources (gcc), which may include CUDA runtime headers.
      cu_srcs: CUDA sources, one nvcc action each.
      hdrs: public headers (also visible to the .cu files).
      cu_hdrs: private headers included by the .cu files (`.h` ones also by srcs).
      cu_deps: labels of further headers the .cu files include (filegroups).
      nvcc_flags: extra nvcc flags per .cu file, e.g. {"random.cu": ["--fmad=false"]}.
      deps: cc deps of the library (added only when CUDA is built).
      copts: extra host-compiler options for srcs.
      linkopts: extra link options.
      **kwargs: passed to cc_library.
    """
    # loom's includes are relative to its root: the exec root itself inside
    # loom, external/<name> where another workspace uses loom as a repository.
    repository = native.repository_name().lstrip("@")
    includes = "-Iexternal/{0} -I$(GENDIR)/external/{0}".format(repository) if repository else "-I. -I$(GENDIR)"

    objects = []
    if CUDA_FOUND:
        for cu in cu_srcs:
            obj = "_objs_cuda/%s/%s.o" % (name, _object_name(cu))
            extra = " ".join(nvcc_flags.get(cu, []))
            native.genrule(
                name = "%s_%s_nvcc" % (name, _object_name(cu)),
                srcs = [cu] + cu_hdrs + hdrs + cu_deps,
                outs = [obj],
                cmd = " ".join([
                    "if [ \"$(COMPILATION_MODE)\" = dbg ]; then mode='-g -lineinfo'; else mode=-DNDEBUG; fi;",
                    NVCC,
                    "-c",
                    " ".join(NVCC_FLAGS),
                    "$$mode",
                    extra,
                    includes,
                    "-o $@ $(location %s)" % cu,
                ]),
                message = "nvcc %s" % cu,
                tags = ["manual"],
                visibility = ["//visibility:private"],
            )
            objects.append(obj)

    enabled = CUDA_FOUND
    native.cc_library(
        name = name,
        srcs = select({
            "//:cuda_enabled": (srcs + objects + [h for h in cu_hdrs if h.endswith(".h")]) if enabled else [],
            "//conditions:default": [],
        }),
        hdrs = hdrs,
        deps = select({
            "//:cuda_enabled": (deps + ["@local_cuda//:cuda_runtime"]) if enabled else [],
            "//conditions:default": [],
        }),
        copts = LOOM_COPTS + copts,
        linkopts = select({
            "//:cuda_enabled": (LOOM_LINKOPTS + linkopts) if enabled else [],
            "//conditions:default": [],
        }),
        alwayslink = True,
        linkstatic = True,
        **kwargs
    )

# The CUDA libraries' folder, for targets that call cuBLAS directly (benchmarks).
CUDA_LIB_DIR = CUDA_ROOT + "/lib64"
