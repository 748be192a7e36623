"""A boolean command-line flag (`--//:cuda=false`), as bazel_skylib's bool_flag,
which is not packaged in Debian."""

BoolFlagInfo = provider(fields = ["value"])

def _bool_flag_impl(ctx):
    return BoolFlagInfo(value = ctx.build_setting_value)

bool_flag = rule(
    implementation = _bool_flag_impl,
    build_setting = config.bool(flag = True),
)
