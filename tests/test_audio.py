"""Audio: recordings become pages of `[mm:ss]` lines through the real engine and models.

The slow tests run faster-whisper with the test models conftest.py assembles (tiny.en, and
the multilingual base) on the recordings in ../shared/corpus/audio, 2 threads, int8.
"""

import asyncio
import json
import re
import subprocess
import sys
import time
import unicodedata
import wave
from pathlib import Path

import pytest
import zhconv
from conftest import call, clean_env, shared_path
from fastmcp import Client
from fastmcp.client.transports import StdioTransport

import extract
import formats
import fulltext
import ingest
import kb as kbmod
import search
from bench import benchmark
from formats import audio, base
from ranking.request import SearchRequest

AUDIO = ("corpus", "audio")
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def default_settings():
    """Each test starts from the defaults; a test's `configure` does not leak."""
    audio.configure(None)
    yield
    audio.configure(None)


@pytest.fixture
def base_model(whisper_models, monkeypatch):
    if "base" not in whisper_models:
        pytest.skip("needs the test model packages from requirements-models.txt")
    monkeypatch.setenv(audio.MODEL_ENV, str(whisper_models["base"]))
    return whisper_models["base"]


@pytest.fixture
def tiny_model(whisper_models, monkeypatch):
    if "tiny.en" not in whisper_models:
        pytest.skip("needs the test model packages from requirements-models.txt")
    monkeypatch.setenv(audio.MODEL_ENV, str(whisper_models["tiny.en"]))
    return whisper_models["tiny.en"]


@pytest.fixture
def engine_runs(monkeypatch):
    """How many times the real engine ran (each call still does the real work)."""
    runs = []
    real = audio.FasterWhisper.transcribe

    def counting(self, path, language, progress=None):
        runs.append(path.name)
        return real(self, path, language, progress)

    monkeypatch.setattr(audio.FasterWhisper, "transcribe", counting)
    return runs


def make_kb(tmp_path, audio_block=None) -> kbmod.KnowledgeBase:
    """A BM25-only KB (this file is about transcripts, not embeddings)."""
    kb = kbmod.open_or_create(tmp_path / "base", "talks")
    config = {"id": "talks", "embedding": {"provider": "none"}, "audio": audio_block or {}}
    (kb.folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return kbmod.load(tmp_path / "base", "talks")


def source_rows(kb: kbmod.KnowledgeBase) -> dict[str, dict]:
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        return {r["name"]: r for r in fulltext.list_sources(conn, 0, 100)}
    finally:
        conn.close()


def normalise(text: str) -> str:
    """Lower case, without punctuation, spaces, newlines or timestamps: what CER compares."""
    text = re.sub(r"\[\d+:\d\d(?::\d\d)?\]", "", text).lower()
    return "".join(c for c in text if not unicodedata.category(c).startswith(("P", "Z", "S", "C")))


def test_cer_is_the_textbook_edit_distance_over_the_reference():
    assert cer("kitten", "sitting") == 0.5 and cer("abc", "abc") == 0.0
    assert cer("语音识别\n", "[00:00] 语音, 识别。") == 0.0  # the .txt ends with a newline


def cer(reference: str, hypothesis: str) -> float:
    """Character error rate: Levenshtein distance over the reference's length."""
    ref, hyp = normalise(reference), normalise(hypothesis)
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1] / max(len(ref), 1)


def text_of(doc: extract.Extracted) -> str:
    return " ".join(line for page in doc.pages for line in page)


# ----------------------------------------------------------------------------- no model


def test_timestamps_switch_to_hours_past_the_first_hour():
    assert [audio.stamp(s) for s in (0, 59.9, 61, 3599.9, 3600, 37230.4)] == \
        ["[00:00]", "[00:59]", "[01:01]", "[59:59]", "[1:00:00]", "[10:20:30]"]


def test_pages_are_ten_minute_spans_and_a_silent_span_is_an_empty_page():
    segments = [(1.2, 4.0, "hello"), (599.0, 601.0, "edge"), (1250.0, 1252.0, "later"),
                (1300.0, 1301.0, "")]
    assert audio.to_pages(segments) == [["[00:01] hello", "[09:59] edge"], [],
                                        ["[20:50] later"]]


def test_simplified_converts_traditional_chinese_and_leaves_latin_alone():
    pages = audio.to_pages([(0.0, 2.0, "歡迎體驗語音識別 OK")], simplified=True)
    assert pages == [["[00:00] 欢迎体验语音识别 OK"]]


@pytest.mark.parametrize(("block", "language", "simplified"), [
    (None, "zh", True), (None, "yue", False), (None, "en", False),
    ({"simplified": False}, "zh", False), ({"simplified": True}, "ja", True)])
def test_mandarin_is_written_in_simplified_unless_the_kb_says_otherwise(block, language,
                                                                         simplified):
    # Issue 49 item 5: Mandarin came out in Traditional unless the KB opted in to Simplified
    assert audio.in_simplified(audio.configure(block), language) is simplified


def test_model_size_follows_the_machine():
    gb = 2**30
    assert audio.choose_model(16 * gb, 2, cuda=True) == "large-v3-turbo"
    assert audio.choose_model(16 * gb, 8, cuda=False) == "small"
    assert audio.choose_model(23 * gb, 2, cuda=False) == "base"
    assert audio.choose_model(1 * gb, 4, cuda=False) == "tiny"


def test_env_model_wins_over_the_kb_and_auto_records_why(monkeypatch):
    settings = audio.Settings(model="small")
    monkeypatch.setenv(audio.MODEL_ENV, "/models/medium")
    assert audio.resolve_model(settings) == ("/models/medium", audio.MODEL_ENV)
    monkeypatch.delenv(audio.MODEL_ENV)
    assert audio.resolve_model(settings) == ("small", "config")
    model, note = audio.resolve_model(audio.Settings(device="cpu"))
    assert model in ("tiny", "base", "small") and re.match(r"auto: \d+ cores, \d+ GB RAM$", note)


def test_cache_key_tells_engines_models_languages_and_same_named_folders_apart(monkeypatch,
                                                                                tmp_path):
    monkeypatch.setenv(audio.CACHE_ENV, str(tmp_path))
    sha = "ab" * 32
    paths = {audio.cache_path(sha, e, m, lang) for e, m, lang in [
        ("faster-whisper", "base", "auto"), ("openai-whisper", "base", "auto"),
        ("faster-whisper", "small", "auto"), ("faster-whisper", "base", "zh"),
        ("faster-whisper", "/a/base", "auto"), ("faster-whisper", "/b/base", "auto")]}
    assert len(paths) == 6 and all(p.parent == tmp_path / "ab" / sha for p in paths)


def test_cache_dir_follows_env_then_platform(monkeypatch, tmp_path):
    monkeypatch.setenv(audio.CACHE_ENV, str(tmp_path))
    assert audio.default_cache_dir() == tmp_path
    monkeypatch.delenv(audio.CACHE_ENV)
    monkeypatch.setenv("LOCALAPPDATA", str(tmp_path))
    assert audio.default_cache_dir("win32") == tmp_path / "linecite" / "cache" / "audio"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert audio.default_cache_dir("linux") == tmp_path / "linecite" / "audio"


@pytest.mark.parametrize("block, field", [
    ({"engine": "whisper.cpp"}, "audio.engine"), ({"device": "gpu"}, "audio.device"),
    ({"language": "Chinese"}, "audio.language"), ({"threads": True}, "audio.threads"),
    ({"threads": 999}, "audio.threads"), ({"simplified": "yes"}, "audio.simplified"),
    ({"modle": "base"}, "audio.modle")])
def test_kb_refuses_a_wrong_audio_field_by_name(tmp_path, block, field):
    with pytest.raises(kbmod.ConfigError, match=re.escape(f"'{field}'")):
        make_kb(tmp_path, block)


def test_kb_keeps_a_good_audio_block(tmp_path):
    block = {"engine": "faster-whisper", "model": "small", "language": "zh", "device": "cpu",
             "simplified": True, "threads": 2}
    assert make_kb(tmp_path, block).audio == block
    assert audio.configure(block) == audio.Settings(**block)


def test_every_audio_suffix_is_registered():
    assert all(extract.supported(Path(f"talk{s.upper()}")) for s in formats.AUDIO_SUFFIXES)


def test_mislabelled_and_truncated_audio_fail_with_a_reason_before_any_model(tmp_path,
                                                                              engine_runs):
    pdf = tmp_path / "minutes.mp3"
    pdf.write_bytes(b"%PDF-1.4\n" + b"1 0 obj << /Type /Catalog >> endobj\n" * 50)
    cut = tmp_path / "cut.wav"  # a RIFF header that promises audio, then nothing
    cut.write_bytes(b"RIFF\x24\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00"
                    b"\x80\x3e\x00\x00\x00\x7d\x00\x00\x02\x00\x10\x00data\x00\x00\x00\x00")
    text = tmp_path / "notes.ogg"
    text.write_text("not a recording\n" * 20, encoding="utf-8")
    for path in (pdf, cut, text):
        with pytest.raises(extract.ExtractError) as err:
            extract.extract(path)
        assert err.value.reason == "corrupt" and path.name in err.value.detail
        assert "re-export" in err.value.detail
    kb = make_kb(tmp_path)
    summary = ingest.ingest(kb, [pdf, cut, text])
    assert {f["reason"] for f in summary.failed} == {"corrupt"} and len(summary.failed) == 3
    assert engine_runs == []


@pytest.fixture
def no_engine(monkeypatch):
    """faster-whisper not installed: its import fails as it does on a bare install."""
    monkeypatch.setitem(sys.modules, "faster_whisper", None)
    monkeypatch.setattr(audio._STATE, "models", {})


def test_without_an_engine_the_error_names_the_install_command(no_engine):
    path = shared_path(*AUDIO, "en", "whisper", "jfk.flac")
    with pytest.raises(extract.ExtractError) as err:
        extract.extract(path)
    assert err.value.reason == "audio-unavailable"
    assert audio.install_command() in err.value.detail
    assert "requirements-audio.txt" in err.value.detail
    assert audio.install_command("win32") == r".\install.ps1 -WithAudio"


def test_without_an_engine_a_recording_needs_action(tmp_path, no_engine):
    summary = ingest.ingest(make_kb(tmp_path), [shared_path(*AUDIO, "en", "whisper", "jfk.flac")])
    assert [(f["state"], f["reason"]) for f in summary.needs_action] == \
        [("needs_action", "audio-unavailable")]


def test_without_openai_whisper_its_kb_needs_action_naming_its_install(tmp_path, monkeypatch):
    """The openai-whisper engine's only test here: PyTorch is too big for the test machines,
    so this pins the path every user without it takes (a machine with it may run the rest)."""
    monkeypatch.setitem(sys.modules, "whisper", None)  # as on an install without it
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setattr(audio._STATE, "models", {})
    kb = make_kb(tmp_path, {"engine": "openai-whisper", "model": "base"})
    summary = ingest.ingest(kb, [shared_path(*AUDIO, "en", "whisper", "jfk.flac")])
    [failed] = summary.needs_action
    assert (failed["state"], failed["reason"]) == ("needs_action", "audio-unavailable")
    assert "`pip install openai-whisper`" in failed["detail"]
    assert "audio.engine to faster-whisper" in failed["detail"]
    assert source_rows(kb)["jfk.flac"]["state"] == "needs_action"


# ----------------------------------------------------------------------------- real models


@pytest.mark.slow
def test_english_character_error_rate_with_base(base_model, record_property):
    folder = shared_path(*AUDIO, "en", "whisper")
    doc = extract.extract(folder / "jfk.flac")
    rate = cer((folder / "jfk.txt").read_text(encoding="utf-8"), text_of(doc))
    record_property("cer", rate)
    assert rate < 0.15, text_of(doc)
    assert doc.pages[0][0].startswith("[00:00] And so my fellow Americans")
    assert re.fullmatch(r"faster-whisper:whisper-base-[\d.]+ en \d+\.\ds", doc.parser)


@pytest.mark.slow
def test_chinese_character_error_rate_in_simplified_with_base(base_model, record_property):
    audio.configure({"simplified": True})
    folder = shared_path(*AUDIO, "zh")
    doc = extract.extract(folder / "funasr_asr_example.wav")
    rate = cer((folder / "funasr_asr_example.txt").read_text(encoding="utf-8"), text_of(doc))
    record_property("cer", rate)
    assert rate < 0.15, text_of(doc)
    assert " zh " in doc.parser


@pytest.mark.slow
def test_a_mandarin_recording_is_transcribed_in_simplified_by_default(base_model):
    # Issue 49 item 5: with no `simplified` in the KB, base wrote 歡迎大家來體驗... (Traditional)
    # for this clip, whose own transcript is Simplified; `"simplified": false` keeps that text
    recording = shared_path(*AUDIO, "zh", "funasr_asr_example.wav")
    expected = recording.with_suffix(".txt").read_text(encoding="utf-8").strip()
    default = text_of(extract.extract(recording))
    audio.configure({"simplified": False})
    as_whisper_wrote = text_of(extract.extract(recording))  # from the transcript cache
    assert default.startswith("[00:00] 欢迎大家来体验") and cer(expected, default) < 0.15
    assert zhconv.convert(default, "zh-hans") == default
    assert as_whisper_wrote.startswith("[00:00] 歡迎大家來體驗"), as_whisper_wrote
    assert zhconv.convert(as_whisper_wrote, "zh-hans") == default


@pytest.mark.slow
def test_counting_clip_gives_the_same_words_in_wav_mp3_and_m4a(tiny_model):
    folder = shared_path(*AUDIO, "en", "markitdown")
    words = {suffix: normalise(text_of(extract.extract(folder / f"test{suffix}")))
             for suffix in (".wav", ".mp3", ".m4a")}
    assert len(set(words.values())) == 1, words
    assert words[".wav"] in ("12345", "onetwothreefourfive"), words


@pytest.mark.slow
@pytest.mark.parametrize("relative", ["en/docling/silent_1s.wav", "nonspeech/CantinaBand3.wav"])
def test_no_speech_gives_no_lines_and_says_so(tiny_model, relative):
    doc = extract.extract(shared_path(*AUDIO, *relative.split("/")))
    assert doc.pages == [[]]
    assert len(doc.warnings) == 1 and doc.warnings[0].startswith("no speech: faster-whisper")


@pytest.mark.slow
def test_no_speech_indexes_with_zero_chunks_and_a_warning(tmp_path, tiny_model):
    summary = ingest.ingest(make_kb(tmp_path), [shared_path(*AUDIO, "nonspeech")])
    assert summary.failed == [] and summary.indexed == 1 and summary.chunks == 0
    assert [w["warning"][:10] for w in summary.warnings] == ["no speech:"]


@pytest.mark.slow
def test_search_finds_spoken_phrases_with_their_time_and_reindex_never_transcribes(
        tmp_path, base_model, engine_runs, monkeypatch):
    monkeypatch.setenv(audio.CACHE_ENV, str(tmp_path / "transcripts"))  # a cold cache
    kb = make_kb(tmp_path, {"simplified": True})
    audio.configure(kb.audio)  # what ingest does with the KB's audio block
    recordings = [shared_path(*AUDIO, "en", "whisper", "jfk.flac"),
                  shared_path(*AUDIO, "zh", "funasr_asr_example.wav")]
    summary = ingest.ingest(kb, recordings)
    assert summary.failed == [] and summary.indexed == 2
    assert sorted(engine_runs) == ["funasr_asr_example.wav", "jfk.flac"]
    conn = fulltext.connect(kb.fulltext_path, readonly=True)
    try:
        searcher = search.Searcher(conn)
        for query, name in (("ask not what your country can do", "jfk.flac"),
                            ("语音识别模型", "funasr_asr_example.wav")):
            hit = searcher.search(SearchRequest(query, 1, "bm25"))[0]
            assert hit.source.endswith(name) and (hit.page, hit.line_start) == (1, 1)
            line = fulltext.page_lines(conn, hit.source, hit.page, hit.line_start,
                                       hit.line_start)
            assert line[0][1].startswith("[00:00] ")
    finally:
        conn.close()
    parsers = {name: row["parser"] for name, row in source_rows(kb).items()}
    assert all(p.startswith("faster-whisper:whisper-base") for p in parsers.values()), parsers
    again = ingest.ingest(kb, recordings, force=True)  # re-extracts, from the cache
    assert again.indexed == 2 and len(engine_runs) == 2


# ----------------------------------------------------------------------------- progress


def test_progress_tells_each_whole_percent_once_and_ends_at_one():
    told = []
    with base.reporting(lambda share, stage, detail: told.append((share, stage, detail))):
        reached = audio._steps(base.listener(), 200.0)
        for seconds in (1.0, 1.5, 7.0, 7.2, 100.0, 199.9, 250.0):
            reached(seconds)
    assert told == [(share, "transcribing", f"{at} of 03:20") for share, at in (
        (0.0, "00:01"), (0.03, "00:07"), (0.5, "01:40"), (0.99, "03:19"), (1.0, "03:20"))]
    assert base.listener() is None  # the `with` put it back


@pytest.fixture(scope="module")
def long_recording(tmp_path_factory) -> Path:
    """Two minutes of real speech: three English corpus clips joined four times over, 16 kHz
    mono, long enough for progress to be seen moving (the corpus has no long recording)."""
    import av

    pcm = bytearray()
    for clip in ("whisper/jfk.flac", "docling/sample_10s.mp3", "markitdown/test.wav"):
        resampler = av.AudioResampler(format="s16", layout="mono", rate=16000)
        with av.open(str(shared_path(*AUDIO, "en", *clip.split("/")))) as container:
            for frame in [*container.decode(audio=0), None]:  # None flushes the resampler
                for out in resampler.resample(frame):
                    pcm += out.to_ndarray().tobytes()
    path = tmp_path_factory.mktemp("long") / "talk.wav"
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(16000)
        out.writeframes(bytes(pcm) * 4)
    return path


@pytest.mark.slow
def test_transcription_reports_rising_shares_while_it_runs_and_none_from_the_cache(
        long_recording, tiny_model, tmp_path, monkeypatch):
    monkeypatch.setenv(audio.CACHE_ENV, str(tmp_path))  # a cold cache: the engine runs
    told, started = [], time.monotonic()
    found = audio.transcribe(long_recording, audio.Settings(),
                             progress=lambda share, stage, *_: told.append(
                                 (share, stage, time.monotonic() - started)))
    shares = [share for share, _, _ in told]
    assert shares[0] == 0.0 and told[0][2] < 0.1  # at once, before the model loads
    assert shares[1:] == sorted(set(shares[1:])) and shares[-1] == 1.0 and len(shares) >= 10
    assert {stage for _, stage, _ in told} == {"transcribing"}
    assert told[1][2] < 0.5 * told[-1][2]  # the first segment's report came early, not last
    assert 100 < found.duration < 120 and len(found.segments) >= 10
    again = []
    audio.transcribe(long_recording, audio.Settings(), progress=lambda *a: again.append(a))
    assert again == []


@pytest.mark.slow
def test_indexer_reports_the_recording_in_hand_with_its_percentage(tmp_path, tiny_model,
                                                                    monkeypatch):
    monkeypatch.setenv(audio.CACHE_ENV, str(tmp_path / "transcripts"))
    messages = []
    summary = ingest.ingest(make_kb(tmp_path), [shared_path(*AUDIO, "en", "whisper", "jfk.flac")],
                            report=lambda done, total, message: messages.append(
                                (done, total, message)))
    assert summary.indexed == 1
    audio_steps = [m for m in messages if m[2].startswith("transcribing")]
    assert messages[0] == (0, 1, "indexing jfk.flac") and audio_steps
    assert all(re.fullmatch(r"transcribing jfk\.flac \d+%", m) and (d, t) == (0, 1)
               for d, t, m in audio_steps)
    assert audio_steps[0][2] == "transcribing jfk.flac 0%"
    assert audio_steps[-1][2] == "transcribing jfk.flac 100%" and messages[-1][2] == "done"


@pytest.mark.slow
async def test_cli_bar_and_get_index_info_show_the_recording_and_its_percentage(
        tmp_path, long_recording, tiny_model):
    base = tmp_path / "base"
    make_kb(tmp_path, None)  # a BM25-only KB `talks` under `base`
    parts = []  # how far the recording is: get_index_info's progress.part
    env = clean_env(LINECITE_AUDIO_CACHE=str(tmp_path / "transcripts"))  # cold: it runs
    seen = []
    transport = StdioTransport(command=sys.executable,
                               args=[str(REPO / "server.py"), "--base-path", str(base)],
                               env=env, cwd=str(REPO))
    async with Client(transport) as client:
        await call(client, "get_index_info", kb_id="talks")  # the server is up
        with (tmp_path / "stderr.txt").open("w", encoding="utf-8") as err:
            cli = subprocess.Popen([sys.executable, str(REPO / "ingest.py"), str(long_recording),
                                    "--kb", "talks", "--base-path", str(base)], cwd=REPO,
                                   env=env, stdout=subprocess.DEVNULL, stderr=err)
            try:
                while cli.poll() is None:
                    info = await call(client, "get_index_info", kb_id="talks")
                    if info["status"] == "running" and info["progress"]:
                        seen.append(info["progress"]["file"])
                        parts.append(info["progress"].get("part"))
                    await asyncio.sleep(0.2)
            finally:
                if cli.poll() is None:  # a failed assertion above: leave no process behind
                    cli.kill()
                cli.wait(timeout=30)
    assert cli.returncode == 0
    percents = [int(m[1]) for f in seen if (m := re.fullmatch(r"transcribing talk\.wav (\d+)%",
                                                              f or ""))]
    assert len(percents) >= 2 and percents == sorted(percents), seen
    times = [p["detail"] for p in parts if p and p["stage"] == "transcribing" and p["detail"]]
    assert times and all(re.fullmatch(r"\d\d:\d\d of 01:\d\d", t) for t in times), parts
    bar = (tmp_path / "stderr.txt").read_text(encoding="utf-8")
    shown = [int(p) for p in re.findall(r"talk\.wav (\d+)%", bar)]
    assert len(shown) >= 10 and shown == sorted(shown) and shown[-1] == 100, bar[-2000:]


# ----------------------------------------------------------------------------- benchmark


def test_benchmark_audio_without_recordings_says_where_to_point_it(tmp_path, capsys):
    assert benchmark.main(["audio", "--dir", str(tmp_path)]) == 2
    assert "no recordings in" in capsys.readouterr().err


@pytest.mark.slow
def test_benchmark_audio_times_each_model_against_base(tmp_path, whisper_models, capsys,
                                                       monkeypatch):
    if len(whisper_models) < 2:
        pytest.skip("needs the test model packages from requirements-models.txt")
    monkeypatch.delenv(audio.MODEL_ENV)  # the test models alone, each measured once
    folder = tmp_path / "audio"
    folder.mkdir()
    (folder / "jfk.flac").write_bytes(shared_path(*AUDIO, "en", "whisper", "jfk.flac")
                                      .read_bytes())
    assert benchmark.main(["audio", "--dir", str(folder), "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"jfk\.flac +11\.0 +\d+\.\d{3} RTF +\d+\.\d{3} RTF", out), out
    assert re.search(r"^  base +\d+\.\d\d +\d+\.\d{3} +- +[1-9]\d+$", out, re.M), out
    assert re.search(r"against base \(the baseline\): tiny\.en \d+\.\d\dx its time, "
                     r"\d+\.\d\dx its memory$", out, re.M), out
