"""Several torch releases side by side: the scripts give each release its own pins, virtual
environment, build folder and exported models, and refuse a release they have no pins for before
installing anything."""

import os
import subprocess

from conftest import ROOT


def script_settings(**env):
    """What scripts/common.sh derives, for the environment given (HOME and the release)."""
    show = ('source scripts/common.sh && printf "%s\\n" "$OPARA_TORCH_VERSION" "$OPARA_REQUIREMENTS" "$OPARA_VENV" '
            '"$OPARA_BUILD" "$OPARA_MODELS"')
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OPARA_")}
    result = subprocess.run(["bash", "-c", show], env={**clean, **env}, cwd=ROOT, capture_output=True, text=True,
                            check=True)
    return result.stdout.splitlines()


def default_torch():
    pins = (ROOT / "requirements.txt").read_text().splitlines()
    return next(line.split("==")[1] for line in pins if line.startswith("torch=="))


def test_the_default_release_keeps_the_default_folders(tmp_path):
    release, pins, venv, build, models = script_settings(HOME=str(tmp_path))
    assert release == default_torch()
    assert (pins, venv, build, models) == (str(ROOT / "requirements.txt"), f"{tmp_path}/.cache/opara/venv",
                                           str(ROOT / "build"), str(ROOT / "torchscript_models"))


def test_another_release_gets_its_own_pins_venv_build_and_models(tmp_path):
    release, pins, venv, build, models = script_settings(HOME=str(tmp_path), OPARA_TORCH_VERSION="2.15.0")
    assert release == "2.15.0"
    assert pins == str(ROOT / "requirements" / "torch-2.15.0.txt")
    assert "torch==2.15.0" in (ROOT / "requirements" / "torch-2.15.0.txt").read_text().splitlines()
    assert venv == f"{tmp_path}/.cache/opara/venv-torch2.15.0"
    assert build == str(ROOT / "build-torch2.15.0")
    assert models == str(ROOT / "torchscript_models" / "torch2.15.0")


def test_a_release_without_pins_is_refused_before_anything_is_installed(tmp_path):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OPARA_")}
    result = subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh")],
                            env={**clean, "HOME": str(tmp_path), "OPARA_TORCH_VERSION": "1.0.0"},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "no pins for torch 1.0.0" in result.stderr and "torch-1.0.0.txt" in result.stderr
    assert f"{default_torch()} (the default) or one of: 2.15.0" in result.stderr
    assert not (tmp_path / ".cache").exists(), "a virtual environment was made for a release without pins"
