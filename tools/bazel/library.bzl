"""loom as one installable library: the rules behind //:libloom and //:dist.

Bazel 4 has no rule that links a set of static cc_libraries, whole, into a
shared library: a `cc_binary(linkshared = True)` pulls in only the archive
members something references, and nothing references a library's symbols
before a program does, so it comes out empty. `loom_shared_library` links
every PIC archive of its deps with --whole-archive instead, the way
`alwayslink` would, which also keeps the CUDA backend's static registration
object (and the nvcc-built objects, which are compiled -fPIC and sit in the
same archives).

`loom_public_headers` collects the `hdrs` of loom's own libraries among the
deps (not their private or textual headers, nor Eigen's or CUDA's): the
headers a program may include, installed under include/loom/.
"""

load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain")
load(":version.bzl", "LOOM_VERSION")

def loom_version_header(name, src, out):
    """loom/version.h from its template, with the numbers of version.bzl."""
    major, minor, patch = LOOM_VERSION.split(".")
    native.genrule(
        name = name,
        srcs = [src],
        outs = [out],
        cmd = "sed -e 's/@VERSION@/%s/; s/@MAJOR@/%s/; s/@MINOR@/%s/; s/@PATCH@/%s/' $< > $@" % (
            LOOM_VERSION,
            major,
            minor,
            patch,
        ),
    )

def _shared_library_impl(ctx):
    cc_toolchain = find_cpp_toolchain(ctx)
    features = cc_common.configure_features(
        ctx = ctx,
        cc_toolchain = cc_toolchain,
        requested_features = ctx.features,
        unsupported_features = ctx.disabled_features,
    )
    merged = cc_common.merge_cc_infos(cc_infos = [d[CcInfo] for d in ctx.attr.deps])
    libraries = []
    flags = []
    for linker_input in merged.linking_context.linker_inputs.to_list():
        flags.extend(linker_input.user_link_flags)
        for library in linker_input.libraries:
            archive = library.pic_static_library or library.static_library
            if archive == None:
                fail("%s: %s has no static library to link whole" % (ctx.label, linker_input.owner))
            libraries.append(cc_common.create_library_to_link(
                actions = ctx.actions,
                feature_configuration = features,
                cc_toolchain = cc_toolchain,
                pic_static_library = archive,
                alwayslink = True,
            ))
    whole = cc_common.create_linking_context(linker_inputs = depset([cc_common.create_linker_input(
        owner = ctx.label,
        libraries = depset(libraries),
        user_link_flags = depset(flags),
    )]))
    linked = cc_common.link(
        actions = ctx.actions,
        name = ctx.label.name,
        feature_configuration = features,
        cc_toolchain = cc_toolchain,
        linking_contexts = [whole],
        output_type = "dynamic_library",
        link_deps_statically = True,
        user_link_flags = [
            "-Wl,-soname," + ctx.attr.soname,
            # Every symbol the library uses is found now, not in a user's link.
            "-Wl,-z,defs",
            "-Wl,--version-script," + ctx.file.version_script.path,
        ],
        additional_inputs = [ctx.file.version_script],
    )
    library = linked.library_to_link.resolved_symlink_dynamic_library or linked.library_to_link.dynamic_library
    return [DefaultInfo(files = depset([library]))]

loom_shared_library = rule(
    implementation = _shared_library_impl,
    doc = "Links every library in deps, whole, into one shared library named lib<name>.so.",
    attrs = {
        "deps": attr.label_list(providers = [CcInfo]),
        "soname": attr.string(mandatory = True),
        "version_script": attr.label(allow_single_file = True, mandatory = True),
        "_cc_toolchain": attr.label(default = "@bazel_tools//tools/cpp:current_cc_toolchain"),
    },
    fragments = ["cpp"],
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
)

_HeadersInfo = provider(fields = ["headers"])

# The repository of this .bzl file: "" inside loom, "loom" where loom is @loom.
_LOOM_REPOSITORY = Label("//:BUILD").workspace_name

def _headers_aspect_impl(target, ctx):
    direct = []
    if CcInfo in target and target.label.workspace_name == _LOOM_REPOSITORY:
        direct = target[CcInfo].compilation_context.direct_public_headers
    transitive = [d[_HeadersInfo].headers for d in getattr(ctx.rule.attr, "deps", []) if _HeadersInfo in d]
    return [_HeadersInfo(headers = depset(direct, transitive = transitive))]

_headers_aspect = aspect(
    implementation = _headers_aspect_impl,
    attr_aspects = ["deps"],
)

def _public_headers_impl(ctx):
    return [DefaultInfo(files = depset(transitive = [d[_HeadersInfo].headers for d in ctx.attr.deps]))]

loom_public_headers = rule(
    implementation = _public_headers_impl,
    doc = "The hdrs of loom's own cc_libraries among deps, transitively.",
    attrs = {"deps": attr.label_list(aspects = [_headers_aspect])},
)

def _install_path(file):
    # tensor/tensor.h -> include/loom/tensor/tensor.h; loom/loom.h (and the
    # generated loom/version.h) -> include/loom/loom.h: inside loom the
    # repository's root is the include folder, installed it is include/loom.
    path = file.short_path
    if path.startswith("../"):  # built as @loom//:dist: ../loom/tensor/tensor.h
        path = path.split("/", 2)[2]
    if path.startswith("loom/"):
        path = path[len("loom/"):]
    return "include/loom/" + path

def _dist_impl(ctx):
    version = ctx.attr.version
    major, minor, patch = version.split(".")
    soversion = major + "." + minor
    backends = "CPU and CUDA" if ctx.attr.cuda else "CPU only"
    substitutions = {
        "@VERSION@": version,
        "@SOVERSION@": soversion,
        "@MAJOR@": major,
        "@MINOR@": minor,
        "@CUDA@": "ON" if ctx.attr.cuda else "OFF",
        "@BACKENDS@": backends,
        "@MPI_LIBRARIES@": ";".join(ctx.attr.mpi_libraries),
        "@CUDA_LIBRARIES@": " ".join(['"%s"' % f for f in ctx.attr.cuda_libraries]),
        "@LINK_FLAGS@": " ".join(ctx.attr.link_flags),
    }
    generated = {}
    for template, dest in [
        (ctx.file.cmake_config, "lib/cmake/loom/loomConfig.cmake"),
        (ctx.file.cmake_version, "lib/cmake/loom/loomConfigVersion.cmake"),
        (ctx.file.pkgconfig, "lib/pkgconfig/loom.pc.in"),  # tools/install.sh writes the prefix in
    ]:
        out = ctx.actions.declare_file("%s_files/%s" % (ctx.label.name, dest))
        ctx.actions.expand_template(template = template, output = out, substitutions = substitutions)
        generated[dest] = out
    info = ctx.actions.declare_file("%s_files/share/loom/buildinfo" % ctx.label.name)
    ctx.actions.write(info, "version=%s\nsoversion=%s\ncuda=%d\ncuda_root=%s\n" % (
        version,
        soversion,
        1 if ctx.attr.cuda else 0,
        ctx.attr.cuda_root if ctx.attr.cuda else "",
    ))
    generated["share/loom/buildinfo"] = info

    library = "lib/libloom.so." + version
    headers = ctx.files.headers + [ctx.file.umbrella]
    lines = ["644 %s %s" % (h.path, _install_path(h)) for h in headers]
    lines += ["644 %s %s" % (f.path, dest) for dest, f in generated.items()]
    lines.append("755 %s %s" % (ctx.file.library.path, library))
    manifest = ctx.actions.declare_file(ctx.label.name + ".manifest")
    ctx.actions.write(manifest, "\n".join(sorted(lines)) + "\n")

    out = ctx.actions.declare_file(ctx.label.name + ".tar")
    ctx.actions.run_shell(
        inputs = headers + generated.values() + [ctx.file.library, manifest],
        outputs = [out],
        command = """
set -eu
stage=$(mktemp -d)
chmod 755 "$stage"
trap 'rm -rf "$stage"' EXIT
while read -r mode src dest; do install -D -m "$mode" "$src" "$stage/$dest"; done < {manifest}
ln -s libloom.so.{version} "$stage/lib/libloom.so.{soversion}"
ln -s libloom.so.{soversion} "$stage/lib/libloom.so"
tar --create --file={out} --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$stage" .
""".format(manifest = manifest.path, version = version, soversion = soversion, out = out.path),
        mnemonic = "LoomDist",
        progress_message = "Packing loom's install tree",
    )
    return [DefaultInfo(files = depset([out]), runfiles = ctx.runfiles(files = [out]))]

loom_dist = rule(
    implementation = _dist_impl,
    doc = "The install tree (include/loom, lib, lib/cmake/loom, lib/pkgconfig) as a tar.",
    attrs = {
        "library": attr.label(allow_single_file = True, mandatory = True),
        "headers": attr.label(mandatory = True),
        "umbrella": attr.label(allow_single_file = True, mandatory = True),
        "version": attr.string(mandatory = True),
        "cuda": attr.bool(),
        "cuda_root": attr.string(),
        # Libraries of loom's link that a program links too, by full path
        # (CMake) and as flags (pkg-config).
        "mpi_libraries": attr.string_list(),
        "cuda_libraries": attr.string_list(),
        "link_flags": attr.string_list(),
        "cmake_config": attr.label(allow_single_file = True, mandatory = True),
        "cmake_version": attr.label(allow_single_file = True, mandatory = True),
        "pkgconfig": attr.label(allow_single_file = True, mandatory = True),
    },
)
