"""Builds the kvserve extension with the project's CMake tree.

pyproject.toml holds the metadata; this file only plugs CMake into
setuptools' build_ext. Environment:
  KVSERVE_CMAKE_BUILD_DIR  reuse this CMake build directory (default build/pip)
  KVSERVE_CMAKE_ARGS       extra -D options, space-separated
  KVSERVE_BUILD_JOBS       parallel jobs (default: CMake's)
  KVSERVE_CUDA             1/0: build the CUDA codec's bindings or not (default: where
                           nvcc is found, on PATH or /usr/local/cuda/bin)
"""
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = Path(os.environ.get("KVSERVE_CMAKE_BUILD_DIR", ROOT / "build" / "pip"))
        configure = [
            "cmake", "-S", str(ROOT), "-B", str(build_dir), "-DKVSERVE_PYTHON=ON",
            f"-DPython3_EXECUTABLE={sys.executable}",
        ]
        if not (build_dir / "CMakeCache.txt").exists():  # a fresh tree; else keep its settings
            configure += ["-DCMAKE_BUILD_TYPE=Release", "-DKVSERVE_BUILD_TESTS=OFF",
                          "-DKVSERVE_BUILD_BENCH=OFF"]
            if subprocess.call(["ninja", "--version"], stdout=subprocess.DEVNULL) == 0:
                configure += ["-G", "Ninja"]
            nvcc = shutil.which("nvcc") or (
                "/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
            want_cuda = os.environ.get("KVSERVE_CUDA", "1" if nvcc else "0") == "1"
            configure += [f"-DKVSERVE_CUDA={'ON' if want_cuda else 'OFF'}"]
            if want_cuda and nvcc:
                configure += [f"-DCMAKE_CUDA_COMPILER={nvcc}"]
        configure += shlex.split(os.environ.get("KVSERVE_CMAKE_ARGS", ""))
        subprocess.check_call(configure)
        build = ["cmake", "--build", str(build_dir), "--target", "kvserve_python"]
        if os.environ.get("KVSERVE_BUILD_JOBS"):
            build += ["-j", os.environ["KVSERVE_BUILD_JOBS"]]
        subprocess.check_call(build)
        built = next((build_dir / "python" / "kvserve").glob("_kvserve*.so"))
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        self.copy_file(str(built), str(target))


# Keep setuptools' own outputs out of the CMake build directory and the source root.
SETUPTOOLS_DIR = ROOT / "build" / "setuptools"
SETUPTOOLS_DIR.mkdir(parents=True, exist_ok=True)
setup(ext_modules=[CMakeExtension("kvserve._kvserve")], cmdclass={"build_ext": CMakeBuild},
      options={"build": {"build_base": str(SETUPTOOLS_DIR)},
               "egg_info": {"egg_base": str(SETUPTOOLS_DIR)}})
