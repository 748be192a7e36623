"""loom's version: the one place it is written.

The shared library is libloom.so.<LOOM_VERSION> with the SONAME
libloom.so.<LOOM_SOVERSION>; loom/version.h (generated) gives the same
numbers to C++ code, and the install script reads them from the library's
file name. While loom is 0.x every minor release may change the ABI, so the
SONAME carries major.minor.
"""

LOOM_VERSION = "0.1.0"
LOOM_SOVERSION = ".".join(LOOM_VERSION.split(".")[:2])
