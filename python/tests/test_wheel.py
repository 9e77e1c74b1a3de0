"""A freshly built wheel installs and imports in a clean venv (slow: builds the library;
run with `-m slow`, which scripts/test.sh's Python pass does in a full run)."""
import os
import pathlib
import subprocess
import sys
import tomllib
import venv

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_wheel_installs_in_clean_venv(tmp_path):
    dist = tmp_path / "dist"
    # pip wheel builds in an isolated environment, as `python -m build --wheel` does; the
    # CMake build directory is shared with scripts/test.sh's install, so objects already
    # compiled there are reused.
    defines = os.environ.get("CHIMERA_WHEEL_ARGS", "").split()
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", dist,
                    str(ROOT), *defines], check=True)
    wheels = list(dist.glob("chimera-*.whl"))
    assert len(wheels) == 1, wheels
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    subprocess.run([py, "-m", "pip", "install", "-q", wheels[0]], check=True)
    code = ("import numpy as np, chimera, tempfile, os\n"
            "d = tempfile.mkdtemp()\n"
            "rng = np.random.default_rng(0)\n"
            "docs = [rng.standard_normal((8, 16)).astype(np.float32) for _ in range(50)]\n"
            "ix = chimera.Index.build(os.path.join(d, 'x.idx'), documents=docs, threads=1)\n"
            "s, i = ix.search(np.stack(docs[:3]), k=1, params={'n_probe': 64})\n"
            "assert list(i[:, 0]) == [0, 1, 2], i\n"
            "print('ok', chimera.__version__, chimera.__file__)\n")
    out = subprocess.run([py, "-c", code], cwd=tmp_path, check=True, capture_output=True,
                         text=True).stdout
    with open(ROOT / "pyproject.toml", "rb") as f:
        version = tomllib.load(f)["project"]["version"]
    assert out.startswith(f"ok {version} ") and str(env_dir) in out
