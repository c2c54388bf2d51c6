"""Knowledge bases: where they live and what their config.json says.

The base folder holds one folder per KB (`<base>/<kb_id>/` with `config.json`,
`fulltext.sqlite3` and `chroma/`). The base is `--base-path`, else `LINECITE_HOME`, else the
platform's user data folder. A KB named on the command line that does not exist yet is
created with defaults, so `python ingest.py FILE` needs no set-up at all.

Layer: config: a KB's folder and config.json, above storage and the stages whose settings it
checks.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import contextualize as ctx
import fulltext
from common import atomic, limits, run_status
from providers import chat, embedders
from ranking import fusion, rerank
from ranking import query_expansion as qe
from ranking.request import SearchSettings

# ---------------------------------------------------------------------------
DEFAULT_KB = "default"
SCOPES = ("embedding", "contextualization", "full")  # reindex scopes; merged: each one runs
KB_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
WINDOWS_RESERVED = re.compile(r"^(CON|PRN|AUX|NUL|COM[1-9]|LPT[1-9])(\..*)?$", re.IGNORECASE)
PRUNING_PREFIX = ".pruning-"  # a KB folder renamed aside before it is deleted
PRUNE_TRIES = 5  # rmtree attempts (with backoff) on a folder Windows still holds
MAX_TEXT_EXTENSIONS = 100  # suffixes one KB's textExtensions may list
TEXT_EXTENSION = re.compile(r"\.[A-Za-z0-9_+~-]{1,16}")  # ".adoc": a dot, then no dot
S3_SCHEME = "s3://"  # a sourcePaths entry that is a bucket prefix
CONFIG_LOCK = ".config.lock"  # per KB: held while config.json is read, changed and replaced
# ---------------------------------------------------------------------------


@dataclass
class KnowledgeBase:
    """One KB's folder and its config.json fields (names kept from the surveyed C# server)."""

    id: str
    folder: Path
    name: str = ""
    source_paths: list[str] = field(default_factory=list)
    embedding: dict = field(default_factory=lambda: {"provider": "builtin"})
    chroma_url: str | None = None
    contextualizer: dict = field(default_factory=dict)  # {} = provider none
    audio: dict = field(default_factory=dict)  # {} = faster-whisper, model from the machine
    search: dict = field(default_factory=dict)  # the validated `search` block (fusion)
    query_expansion: dict = field(default_factory=dict)  # {} = provider none
    rerank: dict = field(default_factory=dict)  # the validated `rerank` block; {} = none
    text_extensions: list[str] = field(default_factory=list)  # lower case; read as plain text
    respect_gitignore: bool = True  # folder sync honours .gitignore files (ignores.py)
    watch: bool | str = True  # a running server keeps the folders current (watcher.py)
    urls: dict = field(default_factory=dict)  # the validated `urls` block (url_fetch.py)
    s3: dict = field(default_factory=dict)  # the validated `s3` block (s3_source.py)

    @property
    def folder_paths(self) -> list[str]:
        """The sourcePaths that are folders on disk (not `s3://` buckets)."""
        return [p for p in self.source_paths if not p.startswith(S3_SCHEME)]

    @property
    def bucket_paths(self) -> list[str]:
        """The sourcePaths that are `s3://bucket/prefix` buckets, synced by s3_source.py."""
        return [p for p in self.source_paths if p.startswith(S3_SCHEME)]

    @property
    def fulltext_path(self) -> Path:
        return self.folder / fulltext.FILENAME

    def to_json(self) -> dict:
        data = {"id": self.id, "name": self.name or self.id, "sourcePaths": self.source_paths,
                "embedding": self.embedding}
        if self.chroma_url:
            data["chromaUrl"] = self.chroma_url
        if self.search:
            data["search"] = self.search
        if self.rerank:
            data["rerank"] = self.rerank
        if self.text_extensions:
            data["textExtensions"] = self.text_extensions
        if not self.respect_gitignore:
            data["respectGitignore"] = False
        if self.watch is not True:
            data["watch"] = self.watch
        data.update({k: v for k, v in (("urls", self.urls), ("s3", self.s3)) if v})
        return data


class ConfigError(ValueError):
    """config.json is missing a field or has a wrong one; the message names it."""


def check_kb_id(kb_id: str, base: Path | None = None) -> str:
    """A KB id that is a safe folder name on every OS; with `base`, also not a case variant of
    an existing KB (Windows and macOS would open that KB's folder under another id)."""
    if kb_id.endswith((".", " ")):
        raise ConfigError(f"kb id {kb_id!r} ends with a dot or a space, which Windows drops from "
                          "folder names: remove it")
    if not KB_ID_PATTERN.match(kb_id):
        raise ConfigError(f"kb id {kb_id!r} is not valid: use 1-64 letters, digits, '.', '_' or "
                          "'-', starting with a letter or digit")
    if WINDOWS_RESERVED.match(kb_id):
        raise ConfigError(f"kb id {kb_id!r} is a device name Windows reserves (CON, PRN, AUX, NUL, "
                          "COM1-9, LPT1-9, with any extension): choose another id")
    twin = next((i for i in list_ids(base) if i.casefold() == kb_id.casefold() and i != kb_id),
                None) if base is not None else None
    if twin is not None:
        raise ConfigError(f"kb id {kb_id!r} differs only by case from the existing knowledge base "
                          f"{twin!r}, which Windows treats as the same folder: use {twin!r}")
    return kb_id


def load(base: Path, kb_id: str) -> KnowledgeBase:
    """Read `<base>/<kb_id>/config.json`; FileNotFoundError when the KB does not exist."""
    folder = base / check_kb_id(kb_id)
    path = folder / "config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path} is not valid UTF-8 JSON ({err}); fix it, or delete it to "
                          "start the knowledge base's settings afresh") from err
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a JSON object")
    _validate(data, kb_id, path)
    embedding = data.get("embedding") or {"provider": "builtin"}
    url = os.environ.get("LINECITE_CHROMA_URL") or data.get("chromaUrl")
    if url:
        check_chroma_url(url, "LINECITE_CHROMA_URL" if os.environ.get("LINECITE_CHROMA_URL")
                         else f"{path}: field 'chromaUrl'")
    return KnowledgeBase(kb_id, folder, str(data.get("name") or kb_id),
                         data.get("sourcePaths") or [], embedding, url,
                         data.get("contextualizer") or {}, data.get("audio") or {},
                         data.get("search") or {},
                         query_expansion=data.get("queryExpansion") or {},
                         rerank=data.get("rerank") or {},
                         text_extensions=[e.lower() for e in data.get("textExtensions") or []],
                         respect_gitignore=data.get("respectGitignore") is not False,
                         watch=data.get("watch", True),
                         urls=data.get("urls") or {}, s3=data.get("s3") or {})


SETTING_FIELDS = {"titleWeight": "title_weight", "unitWeight": "unit_weight",
                  "diversity": "diversity", "neighbourWeight": "neighbour_weight",
                  "crossLingual": "cross_lingual"}  # `search` key -> SearchSettings field


def search_settings(kb: KnowledgeBase) -> SearchSettings:
    """The KB's ranking settings for search.py (already validated by load); a field left out
    takes its default, the weight the one for the KB's embedder."""
    method = kb.search.get("fusion", fusion.DEFAULT_FUSION)
    weight = kb.search.get("vectorWeight",
                           fusion.default_weight(method, kb.embedding.get("provider")))
    given = {"cross_lingual": fusion.default_cross_lingual(kb.embedding.get("provider")),
             **{field: kb.search[key] for key, field in SETTING_FIELDS.items()
                if key in kb.search}}
    return SearchSettings(method, weight, **given)


WATCH_VALUES = (True, False, "poll")  # config.json's `watch`; absent: true


def config_stamp(path: Path) -> tuple[int, int, int] | None:
    """What changes when config.json is rewritten: inode, mtime and size; None if it is gone."""
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_ino, info.st_mtime_ns, info.st_size


ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")  # what apiKeyEnv may hold
EXAMPLE_MODELS = {"ollama": "bge-m3", "openai": "text-embedding-3-small",
                  "gemini": "gemini-embedding-001"}  # named in the missing-model error
BLOCK_FIELDS = {  # field -> (type, what it should look like)
    "id": (str, "the folder's name"),
    "name": (str, "a display name"),
    "sourcePaths": (list, "a list of folder paths"),
    "embedding": (dict, '{"provider": "builtin"}'),
    "contextualizer": (dict, '{"provider": "none"}'),
    "chunking": (dict, '{"targetChars": 1000}'),
    "audio": (dict, "an object"),
    "chromaUrl": (str, '"http://127.0.0.1:8001"'),
    "search": (dict, '{"fusion": "rrf"}'),
    "queryExpansion": (dict, '{"provider": "none"}'),
    "rerank": (dict, '{"provider": "none"}'),
    "textExtensions": (list, '[".adoc", ".rst"]'),
    "respectGitignore": (bool, "true or false"),
    "urls": (dict, '{"allowPrivate": false}'),
    "s3": (dict, '{"endpoint": "https://s3.example.com", "accessKeyEnv": "S3_ACCESS_KEY"}'),
}


def _validate(data: dict, kb_id: str, path: Path) -> None:
    """Check config.json field by field; the error names the field and the expected shape."""
    for name, (kind, example) in BLOCK_FIELDS.items():
        value = data.get(name)
        if value is not None and not isinstance(value, kind):
            raise ConfigError(f"{path}: field '{name}' must be {example}, not {value!r}")
    if data.get("id") not in (None, kb_id):
        raise ConfigError(f"{path}: field 'id' is {data['id']!r} but the folder is {kb_id!r}; "
                          "make them equal")
    if not all(isinstance(p, str) for p in data.get("sourcePaths") or []):
        raise ConfigError(f"{path}: field 'sourcePaths' must hold folder paths as strings")
    _validate_embedding(data.get("embedding") or {}, path)
    _validate_contextualizer(data.get("contextualizer") or {}, path)
    _validate_audio(data.get("audio") or {}, path)
    _validate_search(data.get("search") or {}, path)
    _validate_query_expansion(data.get("queryExpansion") or {}, path)
    _validate_rerank(data.get("rerank") or {}, path)
    _validate_text_extensions(data.get("textExtensions") or [], path)
    _validate_urls(data.get("urls") or {}, path)
    _validate_s3(data, path)
    if data.get("watch", True) not in WATCH_VALUES:
        raise ConfigError(f"{path}: field 'watch' must be true (watch the folders while a "
                          "server runs), false (only start_reindex or ingest.py syncs them) or "
                          f"\"poll\" (walk them every second: shares native events miss), not "
                          f"{data['watch']!r}")


def _validate_embedding(block: dict, path: Path) -> None:
    """Check the `embedding` block against embedders.CONFIG_FIELDS; errors name the field."""
    _check_fields("embedding", block, embedders.CONFIG_FIELDS, path)
    provider = block.get("provider") or "builtin"
    if provider not in embedders.PROVIDERS:
        raise ConfigError(f"{path}: field 'embedding.provider' is {provider!r}; known providers: "
                          f"{', '.join(embedders.PROVIDERS)}")
    if provider not in ("builtin", "none") and not block.get("model"):
        raise ConfigError(f"{path}: field 'embedding.model' is needed for provider "
                          f"{provider!r}; name the embedding model, e.g. "
                          f"{EXAMPLE_MODELS[provider]!r}")
    dimension = block.get("dimension")
    if dimension is not None and not 1 <= dimension <= embedders.MAX_DIMENSION:
        raise ConfigError(f"{path}: field 'embedding.dimension' must be 1-"
                          f"{embedders.MAX_DIMENSION}, not {dimension}")
    batch = block.get("batchSize")
    most = embedders.MAX_BATCH.get(provider, 1)
    if batch is not None and not 1 <= batch <= most:
        raise ConfigError(f"{path}: field 'embedding.batchSize' must be 1-{most} for provider "
                          f"{provider!r}, not {batch}")


EXAMPLE_LLMS = {"anthropic": "claude-haiku-4-5", "openai": "gpt-4.1-mini",
                "ollama": "qwen2.5:7b"}  # named in the missing-model error


def _validate_contextualizer(block: dict, path: Path) -> None:
    """Check the `contextualizer` block against contextualize.CONFIG_FIELDS and its bounds."""
    _check_fields("contextualizer", block, ctx.CONFIG_FIELDS, path)
    _check_provider("contextualizer", block, ctx.PROVIDERS, EXAMPLE_LLMS, path)
    _check_bounds("contextualizer", block, {
        "batchSize": (1, ctx.MAX_BATCH), "concurrency": (1, ctx.MAX_CONCURRENCY),
        "maxChars": ctx.MAX_CHARS_RANGE, "numCtx": chat.NUM_CTX_RANGE}, path)


def _check_provider(block_name: str, block: dict, providers: tuple[str, ...],
                    examples: dict[str, str], path: Path) -> None:
    """A known `provider`, and a `model` for each provider `examples` names one for."""
    provider = block.get("provider") or "none"
    if provider not in providers:
        raise ConfigError(f"{path}: field '{block_name}.provider' is {provider!r}; known "
                          f"providers: {', '.join(providers)}")
    if provider in examples and not block.get("model"):
        raise ConfigError(f"{path}: field '{block_name}.model' is needed for provider "
                          f"{provider!r}; name the model, e.g. {examples[provider]!r}")


def _check_bounds(block_name: str, block: dict, bounds: dict[str, tuple], path: Path) -> None:
    """Each number within its (low, high) bounds; JSON's true is no number."""
    for name, (low, high) in bounds.items():
        value = block.get(name)
        if value is not None and (isinstance(value, bool) or not low <= value <= high):
            raise ConfigError(f"{path}: field '{block_name}.{name}' must be {low:g}-{high:g}, "
                              f"not {value}")


def _validate_query_expansion(block: dict, path: Path) -> None:
    """Check the `queryExpansion` block against query_expansion.CONFIG_FIELDS and its bounds."""
    _check_fields("queryExpansion", block, qe.CONFIG_FIELDS, path)
    _check_provider("queryExpansion", block, qe.PROVIDERS, EXAMPLE_LLMS, path)
    _check_bounds("queryExpansion", block, {"count": qe.COUNT_RANGE, "timeout": qe.TIMEOUT_RANGE,
                                            "numCtx": chat.NUM_CTX_RANGE}, path)
    languages = block.get("languages") or []
    if len(languages) > qe.MAX_LANGUAGES or not all(
            isinstance(v, str) and 0 < len(v.strip()) <= qe.MAX_LANGUAGE_CHARS for v in languages):
        raise ConfigError(f"{path}: field 'queryExpansion.languages' must hold up to "
                          f"{qe.MAX_LANGUAGES} language codes or names of 1-"
                          f"{qe.MAX_LANGUAGE_CHARS} characters, such as [\"ko\", \"en\"]")


def _validate_audio(block: dict, path: Path) -> None:
    """Check the `audio` block against audio.CONFIG_FIELDS: engine, device, language, threads."""
    from formats import audio

    _check_fields("audio", block, audio.CONFIG_FIELDS, path)
    choices = {"engine": audio.ENGINES, "device": audio.DEVICES}
    for name, known in choices.items():
        if block.get(name) is not None and block[name] not in known:
            raise ConfigError(f"{path}: field 'audio.{name}' is {block[name]!r}; use one of "
                              f"{', '.join(known)}")
    language = block.get("language")
    if language is not None and not re.fullmatch(r"auto|[a-z]{2,3}", language):
        raise ConfigError(f"{path}: field 'audio.language' must be \"auto\" or a language code "
                          f"such as \"en\", \"zh\" or \"ko\", not {language!r}")
    threads = block.get("threads")
    if threads is not None and not 0 <= threads <= audio.MAX_THREADS:
        raise ConfigError(f"{path}: field 'audio.threads' must be 0-{audio.MAX_THREADS}, not "
                          f"{threads}")


def _check_fields(block_name: str, block: dict, fields: dict, path: Path) -> None:
    """Known fields with the right JSON types, a known key preset, a variable name (never a
    key) in apiKeyEnv, an http(s) baseUrl: what every provider block shares."""
    for name, value in block.items():
        if name not in fields:
            raise ConfigError(f"{path}: field '{block_name}.{name}' is not known; known fields: "
                              f"{', '.join(fields)}")
        kind, example = fields[name]
        wrong_bool = isinstance(value, bool) and kind is int  # JSON true is not a number
        if value is not None and (wrong_bool or not isinstance(value, kind)):
            raise ConfigError(f"{path}: field '{block_name}.{name}' must be {example}, not "
                              f"{value!r}")
    preset = block.get("apiKeyPreset")
    if preset is not None and preset not in embedders.API_KEY_PRESETS:
        raise ConfigError(f"{path}: field '{block_name}.apiKeyPreset' is {preset!r}; known "
                          f"presets: {', '.join(embedders.API_KEY_PRESETS)}")
    env = block.get("apiKeyEnv")
    if env is not None and not ENV_NAME.match(env):
        raise ConfigError(f"{path}: field '{block_name}.apiKeyEnv' must name an environment "
                          f"variable (letters, digits, '_'), not the key itself")
    url = block.get("baseUrl")
    if url is not None and not re.match(r"^https?://[^/\s]+", url):
        raise ConfigError(f"{path}: field '{block_name}.baseUrl' must look like "
                          f"http://host:port, not {url!r}")


SEARCH_WEIGHTS = {  # search block's 0-1 fields -> what 0 and 1 mean
    "vectorWeight": ("BM25 only", "vectors only"),
    "titleWeight": ("file names ignored", "file names only"),
    "unitWeight": ("chunks scored alone", "the chunks around a chunk counted as much as it"),
    "diversity": ("off", "novelty only"),
    "neighbourWeight": ("code chunks ranked alone", "a code chunk lifted by its neighbours"),
    "crossLingual": ("off", "a page in another language as high as its meaning alone ranks it"),
}
SEARCH_FIELDS = ("fusion", *SEARCH_WEIGHTS)


def _validate_search(block: dict, path: Path) -> None:
    """Check the `search` block: `fusion` one of fusion.FUSIONS, the weights 0-1."""
    for name in block:
        if name not in SEARCH_FIELDS:
            raise ConfigError(f"{path}: field 'search.{name}' is not known; known fields: "
                              f"{', '.join(SEARCH_FIELDS)}")
    method = block.get("fusion")
    if method is not None and method not in fusion.FUSIONS:
        raise ConfigError(f"{path}: field 'search.fusion' is {method!r}; use one of "
                          f"{', '.join(fusion.FUSIONS)}")
    for name, (zero, one) in SEARCH_WEIGHTS.items():
        weight = block.get(name)
        if weight is not None and (isinstance(weight, bool) or
                                   not isinstance(weight, (int, float)) or
                                   not 0.0 <= weight <= 1.0):
            raise ConfigError(f"{path}: field 'search.{name}' must be a number from 0 ({zero}) "
                              f"to 1 ({one}), not {weight!r}")


EXAMPLE_RERANKERS = {"cohere": "rerank-v3.5", "llm": "claude-haiku-4-5"}  # in the model error


def _validate_rerank(block: dict, path: Path) -> None:
    """Check the `rerank` block against rerank.CONFIG_FIELDS: a known provider, the model
    where one is needed, chatProvider and numCtx only for `llm`, topN and timeout in bounds."""
    _check_fields("rerank", block, rerank.CONFIG_FIELDS, path)
    _check_provider("rerank", block, rerank.PROVIDERS, EXAMPLE_RERANKERS, path)
    provider = block.get("provider") or "none"
    chat_provider = block.get("chatProvider")
    if provider == "llm" and chat_provider not in chat.PROVIDERS:
        raise ConfigError(f"{path}: field 'rerank.chatProvider' is {chat_provider!r}; provider "
                          f"'llm' asks a chat model through one of {', '.join(chat.PROVIDERS)}")
    for name in ("chatProvider", "numCtx"):
        if provider != "llm" and block.get(name) is not None:
            raise ConfigError(f"{path}: field 'rerank.{name}' is for provider 'llm' only; "
                              f"remove it, or set 'rerank.provider' to \"llm\"")
    _check_bounds("rerank", block, {"topN": rerank.TOP_N_RANGE, "timeout": rerank.TIMEOUT_RANGE,
                                    "numCtx": chat.NUM_CTX_RANGE}, path)


def _validate_text_extensions(suffixes: list, path: Path) -> None:
    """Check `textExtensions`: at most MAX_TEXT_EXTENSIONS suffixes like ".adoc". A suffix a
    reader claims stays with that reader (formats.reader_entry), so a config keeps loading when
    a later version reads one of its suffixes itself."""
    if len(suffixes) > MAX_TEXT_EXTENSIONS:
        raise ConfigError(f"{path}: field 'textExtensions' lists {len(suffixes)} suffixes; at "
                          f"most {MAX_TEXT_EXTENSIONS} are allowed")
    for suffix in suffixes:
        if not isinstance(suffix, str) or not TEXT_EXTENSION.fullmatch(suffix):
            raise ConfigError(f"{path}: field 'textExtensions' must hold suffixes such as "
                              f"\".adoc\" (a dot, then 1-16 letters, digits, '_', '+', '~' or "
                              f"'-'), not {suffix!r}")


URLS_FIELDS = {"allowPrivate": (bool, "true or false")}
S3_FIELDS = {  # the `s3` block: keys only from the environment, as for providers
    "endpoint": (str, '"https://s3.example.com" or "http://127.0.0.1:9000"'),
    "region": (str, '"us-east-1"'),
    "accessKeyEnv": (str, "the name of the variable holding the access key id"),
    "secretKeyEnv": (str, "the name of the variable holding the secret key"),
    "keyPreset": (str, '"aws" or "minio"'),
    "pathStyle": (bool, "true (bucket in the path: MinIO, Ceph) or false (bucket in the host)"),
    "verifyTls": (bool, "true or false"),
}
S3_KEY_PRESETS = {  # keyPreset -> (access key variable, secret key variable)
    "aws": ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"),
    "minio": ("MINIO_ACCESS_KEY", "MINIO_SECRET_KEY"),
}
S3_PATH = re.compile(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[^\x00-\x1f]*)?$")


def _validate_urls(block: dict, path: Path) -> None:
    """The `urls` block: only `allowPrivate`, a boolean."""
    _check_fields("urls", block, URLS_FIELDS, path)


def _validate_s3(data: dict, path: Path) -> None:
    """The `s3` block and the `s3://bucket/prefix` sourcePaths it serves: each such path a
    valid bucket name, the block present when one is, variable names (never keys) in
    accessKeyEnv / secretKeyEnv, a known keyPreset, an http(s) endpoint."""
    block = data.get("s3") or {}
    _check_fields("s3", block, S3_FIELDS, path)
    buckets = [p for p in data.get("sourcePaths") or [] if p.startswith(S3_SCHEME)]
    for bucket in buckets:
        if not S3_PATH.match(bucket):
            raise ConfigError(f"{path}: sourcePaths entry {bucket!r} is not s3://bucket/prefix "
                              "(a bucket name of 3-63 lower-case letters, digits, '.' or '-')")
    if buckets and not block:
        raise ConfigError(f"{path}: sourcePaths holds {buckets[0]!r} but there is no 's3' block; "
                          'add "s3": {"endpoint": ..., "accessKeyEnv": ..., "secretKeyEnv": ...}')
    for name in ("accessKeyEnv", "secretKeyEnv"):
        if block.get(name) is not None and not ENV_NAME.match(block[name]):
            raise ConfigError(f"{path}: field 's3.{name}' must name an environment variable "
                              "(letters, digits, '_'), not the key itself")
    preset = block.get("keyPreset")
    if preset is not None and preset not in S3_KEY_PRESETS:
        raise ConfigError(f"{path}: field 's3.keyPreset' is {preset!r}; known presets: "
                          f"{', '.join(S3_KEY_PRESETS)}")
    endpoint = block.get("endpoint")
    if endpoint is not None and not re.match(r"^https?://[^/\s]+/?$", endpoint):
        raise ConfigError(f"{path}: field 's3.endpoint' must look like https://host[:port], "
                          f"not {endpoint!r}")


def check_chroma_url(url: str, where: str) -> None:
    """A Chroma server URL must be http(s)://host[:port]; anything else is refused here, once,
    instead of failing deep inside the client on the first search."""
    try:
        parts = urlsplit(url)
        host, _port = parts.hostname, parts.port  # a port like ":x" raises ValueError here
    except ValueError as err:
        raise ConfigError(f"{where} is {url!r}: {err}; use http://host:port") from None
    if parts.scheme not in ("http", "https") or not host:
        raise ConfigError(f"{where} is {url!r}; a Chroma server is reached as http://host:port "
                          "or https://host:port (start one with `chroma run --path DIR`)")


def open_or_create(base: Path, kb_id: str) -> KnowledgeBase:
    """The KB, creating its folder and a default config.json the first time it is named."""
    check_kb_id(kb_id, base)
    try:
        return load(base, kb_id)
    except FileNotFoundError:
        folder = base / check_kb_id(kb_id)
        folder.mkdir(parents=True, exist_ok=True)
        config = KnowledgeBase(kb_id, folder, name=kb_id).to_json()
        atomic.write_json(folder / "config.json", config)
        return load(base, kb_id)


def follow(kb: KnowledgeBase, folder: Path) -> bool:
    """Add a folder to the KB's sourcePaths (config.json rewritten, other fields kept), so
    folder sync, check_changes and start_reindex keep it current; False if it was there."""
    resolved = folder.expanduser().resolve()
    if limits.path_text(resolved) != str(resolved):
        raise limits.UserError(
            f"cannot follow {limits.path_text(resolved)}: its name holds bytes that are not "
            "UTF-8, which config.json cannot keep; rename the folder (or index it once with "
            "--once) and try again")
    known = {os.path.normcase(Path(p).expanduser().resolve()) for p in kb.folder_paths}
    if os.path.normcase(resolved) in known:
        return False
    path = kb.folder / "config.json"
    with run_status.briefly_held(kb.folder / CONFIG_LOCK, "a config.json change"):
        data = json.loads(path.read_text(encoding="utf-8"))
        data["sourcePaths"] = [*(data.get("sourcePaths") or []), str(resolved)]
        atomic.write_json(path, data)
    kb.source_paths = data["sourcePaths"]
    return True


def update(base: Path, kb_id: str, change: Callable[[dict], None]) -> KnowledgeBase:
    """Apply `change` to the KB's config.json and write it back atomically, after the same
    checks `load` makes: a value the file would be refused for is refused here (ConfigError
    naming the field) and the file stays as it was. Other fields, unknown to us, are kept.
    Under the KB's CONFIG_LOCK, so two changes at once (the page, `ingest.py --follow`) both
    land instead of the later write undoing the earlier."""
    path = base / check_kb_id(kb_id) / "config.json"
    with run_status.briefly_held(path.parent / CONFIG_LOCK, "a config.json change"):
        data = json.loads(path.read_text(encoding="utf-8"))
        change(data)
        _validate(data, kb_id, path)
        atomic.write_json(path, data)
    return load(base, kb_id)


def list_ids(base: Path) -> list[str]:
    """KB ids under the base folder: folders that have a config.json."""
    if not base.is_dir():
        return []
    return sorted(p.name for p in base.iterdir() if (p / "config.json").is_file())


def prune_orphans(base: Path) -> dict:
    """Remove KB folders that lost their config.json: `{"removed": [names], "failed": {name:
    reason}}`. Each folder is first renamed aside (Windows refuses while a process holds a file
    in it, and then nothing of it is deleted), then deleted with retries; one failure never
    stops the others. Folders a failed run left renamed aside are deleted again.

    Only folders that hold a KB's data (fulltext.sqlite3 or chroma/) count; names starting with
    '.' or '_' or containing '-backup-' are never touched, whatever they hold.
    """
    result: dict = {"removed": [], "failed": {}}
    if not base.is_dir():
        return result
    for folder in sorted(base.glob(PRUNING_PREFIX + "*")):
        name = folder.name[len(PRUNING_PREFIX):].rsplit("-", 1)[0]
        error = _delete_tree(folder)
        if error:
            result["failed"][name] = error
        else:
            result["removed"].append(name)
    for folder in sorted(p for p in base.iterdir() if p.is_dir()):
        protected = folder.name.startswith((".", "_")) or "-backup-" in folder.name
        has_data = (folder / fulltext.FILENAME).exists() or (folder / "chroma").is_dir()
        if protected or not has_data or (folder / "config.json").exists():
            continue
        aside = base / f"{PRUNING_PREFIX}{folder.name}-{uuid.uuid4().hex[:8]}"
        try:
            folder.rename(aside)
        except OSError as err:
            result["failed"][folder.name] = (f"in use ({err.strerror or err}): stop the linecite "
                                             "server or indexer that holds it, then run again")
            continue
        error = _delete_tree(aside)
        if error:
            result["failed"][folder.name] = error
        else:
            result["removed"].append(folder.name)
    return result


def _delete_tree(folder: Path) -> str | None:
    """rmtree with backoff (Defender or an indexer may hold a file for a moment); None when
    done, else what to do."""
    delay = 0.05
    for attempt in range(PRUNE_TRIES):
        try:
            shutil.rmtree(folder)
            return None
        except FileNotFoundError:
            return None
        except OSError as err:
            if attempt == PRUNE_TRIES - 1:
                return (f"could not delete {folder} ({err.strerror or err}); it is out of the "
                        "way: delete it by hand, or run prune-orphans again later")
            time.sleep(delay)
            delay *= 2
    return None
