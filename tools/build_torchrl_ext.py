"""Rebuild TorchRL's C++ extension (its segment trees) against the torch installed here.

The torchrl 0.14.1 wheel's prebuilt ``torchrl/_torchrl*.so`` does not load against torch 2.13
("undefined symbol"), so TorchRL's prioritized replay has no C++ segment tree and cannot be
benchmarked. The wheel ships the extension's sources (``torchrl/csrc``); this compiles them with
torch's own extension builder and the flags of TorchRL's setup.py (-O3, C++17, CPU only) and puts
the result in place of the broken binary. Only for benchmarking (the ``bench`` extra).

    python tools/build_torchrl_ext.py        # then: python -c "import torchrl._torchrl"
"""

from __future__ import annotations

import glob
import os
import shutil
import sys
import tempfile


def main() -> int:
    import torchrl
    from setuptools import setup
    from torch.utils.cpp_extension import BuildExtension, CppExtension

    pkg = os.path.dirname(torchrl.__file__)
    csrc = os.path.join(pkg, "csrc")
    sources = [os.path.join(csrc, "pybind.cpp"), os.path.join(csrc, "utils.cpp")]
    with tempfile.TemporaryDirectory() as build:
        os.chdir(build)  # setup() must not read this project's pyproject.toml
        ext = CppExtension(
            "torchrl._torchrl",
            sources,
            include_dirs=[csrc],
            extra_compile_args={"cxx": ["-O3", "-std=c++17", "-fdiagnostics-color=always"]},
        )
        setup(
            name="torchrl_ext_rebuild",
            ext_modules=[ext],
            cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
            script_args=["build_ext", "--build-lib", build, "--build-temp", os.path.join(build, "tmp")],
        )
        built = glob.glob(os.path.join(build, "torchrl", "_torchrl*.so"))
        if not built:
            print("error: the build produced no torchrl/_torchrl*.so", file=sys.stderr)
            return 1
        for old in glob.glob(os.path.join(pkg, "_torchrl*.so")):
            os.replace(old, old + ".prebuilt-broken")
        shutil.copy2(built[0], os.path.join(pkg, os.path.basename(built[0])))
        print(f"installed {os.path.basename(built[0])} into {pkg}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
