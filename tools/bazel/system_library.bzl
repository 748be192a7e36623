"""system_library: a library that a Debian package installed system-wide.

The repository checks that the package's files are there, so that a missing
package fails the build with the package's name rather than a linker error.
Header folders outside /usr/include are linked into the repository and exported
with `includes`, so dependents see them too.
"""

def _system_library_impl(ctx):
    if not ctx.path(ctx.attr.required_file).exists:
        fail("%s not found: install it with `apt-get install %s` (or run tools/setup.sh)" %
             (ctx.attr.required_file, ctx.attr.package))
    includes = []
    for i, folder in enumerate(ctx.attr.include_dirs):
        link = "include_%d" % i
        ctx.symlink(folder, link)
        includes.append(link)
    ctx.file("WORKSPACE", "workspace(name = \"%s\")\n" % ctx.name)
    ctx.file("BUILD", """
cc_library(
    name = "{name}",
    hdrs = glob([{globs}]),
    includes = {includes},
    linkopts = {linkopts},
    visibility = ["//visibility:public"],
)
""".format(
        name = ctx.name,
        globs = ", ".join(['"%s/**/*.h"' % d for d in includes]),
        includes = repr(includes),
        linkopts = repr(ctx.attr.linkopts),
    ))

system_library = repository_rule(
    implementation = _system_library_impl,
    attrs = {
        "package": attr.string(mandatory = True),
        "required_file": attr.string(mandatory = True),
        "include_dirs": attr.string_list(),
        "linkopts": attr.string_list(),
    },
    local = True,
)
