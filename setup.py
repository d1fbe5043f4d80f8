"""pip install --no-build-isolation .  — builds stepscope's Python package offline.

The native module (stepscope._core) is the CMake target stepscope_python_core:
setup.py configures the project with only the library and that module
(STEPSCOPE_PYTHON=ON, no tests, tools, examples or benchmarks), for the
interpreter running it, and copies the module into the package. Nothing is
downloaded: CMake, a C++17 compiler, pybind11 and the library's dependencies
come from the system (scripts/install-deps). STEPSCOPE_CMAKE_ARGS adds
arguments (e.g. "-DSTEPSCOPE_CUDA=OFF"); STEPSCOPE_BUILD_JOBS the parallelism.
"""

import os
import re
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


def version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        return re.search(r"project\(stepscope VERSION ([0-9.]+)", f.read()).group(1)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = os.path.abspath(os.path.join(self.build_temp, "cmake"))
        os.makedirs(build_dir, exist_ok=True)
        args = [
            "cmake",
            "-S",
            ROOT,
            "-B",
            build_dir,
            "-DCMAKE_BUILD_TYPE=Release",
            "-DSTEPSCOPE_PYTHON=ON",
            "-DPython_EXECUTABLE=" + sys.executable,
            "-DSTEPSCOPE_BUILD_TESTS=OFF",
            "-DSTEPSCOPE_BUILD_TOOLS=OFF",
            "-DSTEPSCOPE_BUILD_EXAMPLES=OFF",
            "-DSTEPSCOPE_BUILD_BENCH=OFF",
            "-DSTEPSCOPE_INSTALL=OFF",
        ]
        if shutil.which("ninja"):
            args += ["-G", "Ninja"]
        args += shlex.split(os.environ.get("STEPSCOPE_CMAKE_ARGS", ""))
        subprocess.check_call(args)
        jobs = os.environ.get("STEPSCOPE_BUILD_JOBS", str(os.cpu_count() or 2))
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "stepscope_python_core", "-j", jobs])
        built_dir = os.path.join(build_dir, "python", "stepscope")
        module = [f for f in os.listdir(built_dir) if f.startswith("_core") and f.endswith(".so")]
        if not module:
            raise RuntimeError("the CMake build made no stepscope/_core*.so in " + built_dir)
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.join(built_dir, module[0]), target)


setup(
    name="stepscope",
    version=version(),
    description="What holds your training step back: phase timers, a measured step breakdown and a verdict",
    license="MIT",
    python_requires=">=3.7",
    package_dir={"": "python"},
    packages=["stepscope"],
    ext_modules=[Extension("stepscope._core", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    # Not build/: that is where the project's own CMake build usually lives.
    options={"build": {"build_base": "build-python"}},
    zip_safe=False,
)
