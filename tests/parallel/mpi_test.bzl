"""loom_mpi_test: a GoogleTest binary run under `mpirun -np N` by bazel test."""

def loom_mpi_test(name, binary, np, size = "medium", **kwargs):
    """Runs `binary` (built with mpi_test_main.cc) with `np` ranks.

    The test fails when any rank fails; every test case is counted once, from
    the merged XML of all ranks (see mpi_test_runner.sh).
    """
    native.sh_test(
        name = name,
        srcs = ["//tests/parallel:mpi_test_runner.sh"],
        args = [
            str(np),
            "$(rootpath //tests/parallel:merge_rank_xml.py)",
            "$(rootpath %s)" % binary,
        ],
        data = [
            binary,
            "//tests/parallel:merge_rank_xml.py",
        ],
        size = size,
        **kwargs
    )
