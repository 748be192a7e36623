"""loom_dependencies(): the repositories loom needs, declared offline.

loom's own WORKSPACE calls it, and so does any workspace that uses loom from
source (docs/architecture.md, "loom as a library"):

    local_repository(name = "loom", path = "/path/to/loom")
    load("@loom//tools/bazel:dependencies.bzl", "loom_dependencies")
    loom_dependencies()

and then depends on `@loom//:loom`. A consuming workspace never reads loom's
WORKSPACE, so without this Bazel 4 would try to download rules_cc at once.
Every repository comes from this machine: Debian packages, the CUDA toolkit
when there is one, and loom's own stand-ins for the three repositories Bazel
asks for. A repository the workspace declared before the call (its own
rules_cc, say) is kept.
"""

load(":cuda_configure.bzl", "cuda_configure")
load(":system_library.bzl", "system_library")
load(":system_paths.bzl", "MPI_INCLUDE_DIR", "MPI_LIB_DIR")

def _loom_folder_impl(ctx):
    # The folder sits in loom's tree, wherever that is: found from a file
    # next to it, whose label resolves to @loom or to the main repository.
    folder = ctx.path(ctx.attr.anchor).dirname.get_child(ctx.attr.folder)
    if not folder.exists:
        fail("loom_dependencies: %s is missing from loom's tree" % folder)
    for entry in folder.readdir():
        ctx.symlink(entry, entry.basename)

# A folder of loom's tree (third_party/rules_cc, ...) as a repository of its own.
_loom_folder = repository_rule(
    implementation = _loom_folder_impl,
    attrs = {
        "folder": attr.string(mandatory = True),
        "anchor": attr.label(default = Label("//third_party:BUILD")),
    },
    local = True,
)

def _third_party(file):
    # "//third_party:eigen.BUILD" in loom's workspace, "@loom//third_party:eigen.BUILD" elsewhere.
    return str(Label("//third_party:" + file))

def _maybe(rule, name, **kwargs):
    if not native.existing_rule(name):
        rule(name = name, **kwargs)

def loom_dependencies():
    """Declares every repository loom's libraries, tests and tools use."""

    # Bazel 4 asks for these three on the first cc_* build: local stand-ins
    # keep it from trying to download them.
    _maybe(_loom_folder, "rules_cc", folder = "rules_cc")
    _maybe(
        native.local_repository,
        "rules_java",
        path = "/usr/share/bazel/rules/java",  # Debian package bazel-rules-java
    )
    _maybe(_loom_folder, "remote_coverage_tools", folder = "remote_coverage_tools")

    # Debian packages. Each BUILD file under third_party/ says which package it needs.
    _maybe(
        native.new_local_repository,
        "eigen",  # libeigen3-dev
        build_file = _third_party("eigen.BUILD"),
        path = "/usr/include/eigen3",
    )
    _maybe(
        native.new_local_repository,
        "nlohmann_json",  # nlohmann-json3-dev
        build_file = _third_party("nlohmann_json.BUILD"),
        path = "/usr/include/nlohmann",
    )
    _maybe(
        native.new_local_repository,
        "cli11",  # libcli11-dev
        build_file = _third_party("cli11.BUILD"),
        path = "/usr/include/CLI",
    )

    # Libraries that live in the system library folder: headers come from
    # /usr/include, which the compiler searches already.
    _maybe(
        system_library,
        "gtest",  # libgtest-dev
        linkopts = ["-lgtest", "-pthread"],
        required_file = "/usr/lib/x86_64-linux-gnu/libgtest.a",
        package = "libgtest-dev",
    )
    _maybe(
        system_library,
        "benchmark",  # libbenchmark-dev
        linkopts = ["-lbenchmark", "-pthread"],
        required_file = "/usr/lib/x86_64-linux-gnu/libbenchmark.so",
        package = "libbenchmark-dev",
    )
    _maybe(
        system_library,
        "zlib",  # zlib1g-dev
        linkopts = ["-lz"],
        required_file = "/usr/include/zlib.h",
        package = "zlib1g-dev",
    )
    _maybe(
        system_library,
        "mpi",  # libopenmpi-dev (flags from `mpicxx --showme:compile/link`)
        include_dirs = [MPI_INCLUDE_DIR],
        linkopts = ["-L" + MPI_LIB_DIR, "-lmpi"],
        required_file = MPI_INCLUDE_DIR + "/mpi.h",
        package = "libopenmpi-dev",
    )

    # The CUDA toolkit, if there is one (CUDA_PATH, else /usr/local/cuda).
    # Without it @local_cuda is an empty shell and @loom//:cuda defaults to False.
    _maybe(cuda_configure, "local_cuda")
