"""Where Debian's Open MPI lives: read by the WORKSPACE (through
loom_dependencies) and by the installed CMake and pkg-config files, which
name the library a program that links loom also links."""

MPI_INCLUDE_DIR = "/usr/lib/x86_64-linux-gnu/openmpi/include"
MPI_LIB_DIR = "/usr/lib/x86_64-linux-gnu/openmpi/lib"
