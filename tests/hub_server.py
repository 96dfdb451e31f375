"""A small Hub-compatible HTTP server on loopback, so no test reaches huggingface.co.

It speaks the part of the Hub API that `huggingface_hub` 2.4 uses to push (`create_repo`, `create_branch`,
`validate-yaml`, `preupload` answering "regular" for every file, NDJSON `commit`) and to pull (model and dataset info,
the repo tree, `paths-info`, HEAD/GET on `/{repo}/resolve/{rev}/{file}` (`/datasets/{repo}/...` for datasets) with the
`X-Repo-Commit`, `ETag` and `Content-Length` headers and HTTP Range requests (what streaming reads: see `byte_range`),
and 404s carrying the `X-Error-Code` that `hf_raise_for_status` maps to RepoNotFound / RevisionNotFound /
EntryNotFound). Repositories live in memory: each commit is a full snapshot
{path: bytes}, so a test can read what was pushed. Dataset repositories are keyed `datasets/{user}/{name}`.

Dataset repositories are what `datasets.load_dataset("user/name", "cfg")` (datasets 5.x) reads: the dataset info, the
README's `configs:` YAML block (config_name + data_files), the tree listing and paths-info its file patterns resolve
through (HfFileSystem), and the parquet files. `Hub.create_dataset_repo` makes one from in-memory tables.

`/api/validate-yaml` checks the card metadata with `card_metadata_errors` (the same check a test can call directly):
the real Hub's schema is not public, so this checks what our cards promise — see that function.

Use the `hub` fixture (import it into a test module); point a subprocess at it with `hub.env(home)`: huggingface_hub
reads `HF_ENDPOINT` once at import, so only a fresh interpreter is sure to use the loopback server.
"""

import base64
import hashlib
import json
import os
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
import yaml
from huggingface_hub.repocard_data import model_index_to_eval_results

# Values the Hub accepts for these fields (a subset: what our cards may write).
LICENSES = {"apache-2.0", "mit", "bsd-3-clause", "cc-by-4.0", "cc-by-sa-4.0", "openrail", "other", "unknown"}
PIPELINE_TAGS = {
    "fill-mask",
    "text-classification",
    "question-answering",
    "text2text-generation",
    "token-classification",
    "feature-extraction",
    "text-generation",
    "multiple-choice",
}


def card_metadata_errors(card_text: str) -> list[str]:
    """What is wrong with a model card's YAML metadata (empty list: valid).

    Like the Hub, every field is optional (Trainer's default card has no license), but a field that is there must
    be right: the front matter parses to a mapping; `library_name` is a string; `tags` and `datasets` are lists of
    strings; `license` and `pipeline_tag` take Hub values; `base_model` is a string or list of strings; and
    `model-index` parses with huggingface_hub's own `model_index_to_eval_results` into results that each have a
    task type, a dataset, a metric type and a numeric value.
    """
    if not card_text.startswith("---\n"):
        return ["the card has no YAML front matter"]
    try:
        meta = yaml.safe_load(card_text.split("---\n", 2)[1])
    except (IndexError, yaml.YAMLError) as error:
        return [f"the YAML front matter does not parse: {error}"]
    if not isinstance(meta, dict):
        return ["the YAML front matter is not a mapping"]
    errors = []
    if not isinstance(meta.get("library_name", ""), str):
        errors.append("library_name must be a string")
    for key in ("tags", "datasets"):
        if key in meta and not (isinstance(meta[key], list) and all(isinstance(v, str) for v in meta[key])):
            errors.append(f"{key} must be a list of strings")
    if "license" in meta and meta["license"] not in LICENSES:
        errors.append(f"license {meta.get('license')!r} is not a Hub license id")
    if "pipeline_tag" in meta and meta["pipeline_tag"] not in PIPELINE_TAGS:
        errors.append(f"pipeline_tag {meta['pipeline_tag']!r} is not a Hub pipeline tag")
    base = meta.get("base_model")
    if base is not None and not (isinstance(base, str) or all(isinstance(v, str) for v in base)):
        errors.append("base_model must be a string or a list of strings")
    if "model-index" in meta:
        try:
            name, results = model_index_to_eval_results(meta["model-index"])
        except (KeyError, TypeError, IndexError) as error:
            errors.append(f"model-index does not parse: {error!r}")
        else:
            if not name:
                errors.append("model-index needs a name")
            for r in results:
                if not (r.task_type and r.dataset_type and r.dataset_name and r.metric_type):
                    errors.append(f"model-index result misses a field: {r}")
                if not isinstance(r.metric_value, (int, float)):
                    errors.append(f"model-index metric {r.metric_type} has a non-numeric value {r.metric_value!r}")
    return errors


@dataclass
class Repo:
    private: bool
    branches: dict[str, str] = field(default_factory=dict)  # name -> commit sha
    commits: dict[str, dict] = field(default_factory=dict)  # sha -> {"files": {path: bytes}, "message", "parent"}

    def resolve(self, revision: str) -> str | None:
        if revision in self.branches:
            return self.branches[revision]
        return revision if revision in self.commits else None


class HubState:
    """The server's repositories, plus a log of (method, path) for every request it answered and of
    (path, Range header, status) for every file request that carried a Range header."""

    def __init__(self):
        self.repos: dict[str, Repo] = {}
        self.requests: list[tuple[str, str]] = []
        self.ranges: list[tuple[str, str, int]] = []
        self.lock = threading.Lock()
        self._counter = 0

    def new_commit(self, repo: Repo, files: dict, message: str, parent: str | None) -> str:
        self._counter += 1
        sha = hashlib.sha1(f"{self._counter}:{message}".encode()).hexdigest()
        repo.commits[sha] = {"files": files, "message": message, "parent": parent}
        return sha

    def files(self, repo_id: str, revision: str = "main") -> dict[str, bytes]:
        """The files of `repo_id` at `revision` (a branch or a commit sha)."""
        repo = self.repos[repo_id]
        return repo.commits[repo.resolve(revision)]["files"]

    def history(self, repo_id: str, branch: str = "main") -> list[str]:
        """Commit messages on `branch`, newest first."""
        repo = self.repos[repo_id]
        sha, messages = repo.branches[branch], []
        while sha is not None:
            messages.append(repo.commits[sha]["message"])
            sha = repo.commits[sha]["parent"]
        return messages


def _etag(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # git's blob id, as the Hub uses


def _file_entry(path: str, data: bytes) -> dict:
    return {"type": "file", "path": path, "size": len(data), "oid": _etag(data)}


def byte_range(header: str | None, size: int) -> tuple[int, int] | str | None:
    """How to answer a GET with `Range: header` on a file of `size` bytes, as RFC 9110 (section 14) lets a server:
    - (first, last), inclusive byte positions: one satisfiable range, answered 206 Partial Content with that slice;
    - None: the whole file, 200. For no header, a unit other than bytes, a header that does not parse (`bytes=5-2`,
      `bytes=a-`), or several ranges (a server may send the whole file instead of a multipart body; no client here
      asks for several);
    - "unsatisfiable": 416, for one range that starts at or past the end of the file, or a suffix of 0 bytes.
    """
    if header is None:
        return None
    unit, _, spec = header.partition("=")
    first, dash, last = (part.strip() for part in spec.partition("-"))
    if (
        unit.strip().lower() != "bytes"
        or "," in spec
        or not dash
        or not (first or last)
        or not all(part.isdigit() for part in (first, last) if part)
        or (first and last and int(last) < int(first))
    ):
        return None
    if first:  # "a-b" or "a-": from byte a, to b or the end
        start, end = int(first), min(int(last), size - 1) if last else size - 1
    else:  # "-n": the last n bytes
        start, end = max(size - int(last), 0), size - 1
    return "unsatisfiable" if start >= size or end < start else (start, end)


def _tree_entries(files: dict[str, bytes], prefix: str, recursive: bool) -> list[dict]:
    """The Hub's tree listing of folder `prefix` ("" the root): its files and folders, or everything below it."""
    entries, folders = [], set()
    for path, data in sorted(files.items()):
        if prefix and not path.startswith(prefix + "/"):
            continue
        below = path[len(prefix) + 1 :] if prefix else path
        parts = below.split("/")
        for depth in range(1, len(parts) if recursive else min(2, len(parts))):
            folders.add("/".join(filter(None, [prefix, *parts[:depth]])))
        if recursive or len(parts) == 1:
            entries.append(_file_entry(path, data))
    entries += [{"type": "directory", "path": f, "oid": _etag(f.encode()), "size": 0} for f in sorted(folders)]
    return entries


class Handler(BaseHTTPRequestHandler):
    state: HubState  # set on the subclass made by `serve`
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # keep test output quiet
        pass

    # -- plumbing ------------------------------------------------------------------------------------------------
    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, status: int, body: bytes = b"", headers: dict | None = None, head: bool = False):
        self.send_response(status)
        headers = {"Content-Type": "application/json", **(headers or {})}
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _json(self, status: int, payload, **headers):
        self._send(status, json.dumps(payload).encode(), headers)

    def _error(self, status: int, code: str, message: str, head: bool = False, **headers):
        body = json.dumps({"error": message}).encode()
        self._send(status, body, {"X-Error-Code": code, "X-Error-Message": message, **headers}, head=head)

    def _route(self, method: str):
        url = urlsplit(self.path)
        parts = [unquote(p) for p in url.path.strip("/").split("/")]
        with self.state.lock:
            self.state.requests.append((method, url.path))
            try:
                if parts[:2] == ["api", "models"]:
                    return self._api_repo(method, "", parts[2:], parse_qs(url.query))
                if parts[:2] == ["api", "datasets"]:
                    return self._api_repo(method, "datasets/", parts[2:], parse_qs(url.query))
                if parts[:1] == ["api"]:
                    return self._api(method, parts[1:])
                if "resolve" in parts[1:4]:
                    i = parts.index("resolve")
                    return self._resolve(method, "/".join(parts[:i]), parts[i + 1], "/".join(parts[i + 2 :]))
                return self._error(404, "NotFound", f"no route for {method} {url.path}")
            except Exception as error:  # a bug in the server: make it visible in the client's error
                return self._error(500, "ServerError", f"{type(error).__name__}: {error}")

    def do_GET(self):
        self._route("GET")

    def do_HEAD(self):
        self._route("HEAD")

    def do_POST(self):
        self._route("POST")

    # -- /api/* ----------------------------------------------------------------------------------------------------
    def _api(self, method, parts):
        if method == "POST" and parts == ["repos", "create"]:
            payload = json.loads(self._body())
            if payload.get("type", "model") != "model":
                return self._error(400, "BadRequest", "only model repositories are served here")
            repo_id = (
                f"{payload['organization']}/{payload['name']}" if payload.get("organization") else payload["name"]
            )
            if "/" not in repo_id:
                repo_id = f"tester/{repo_id}"
            url = f"http://{self.headers['Host']}/{repo_id}"
            if repo_id in self.state.repos:
                return self._json(409, {"error": "You already created this model repo", "url": url})
            repo = Repo(private=payload.get("visibility") == "private" or bool(payload.get("private")))
            repo.branches["main"] = self.state.new_commit(repo, {}, "initial commit", None)
            self.state.repos[repo_id] = repo
            return self._json(200, {"url": url, "name": repo_id, "id": repo_id})
        if method == "POST" and parts == ["validate-yaml"]:
            errors = card_metadata_errors(json.loads(self._body())["content"])
            # HfApi._validate_yaml reads JSON {"errors": [{"message"}]}; ModelCard.validate shows the body on a 400
            return self._json(400 if errors else 200, {"errors": [{"message": e} for e in errors], "warnings": []})
        if method == "GET" and parts == ["whoami-v2"]:
            return self._json(200, {"type": "user", "name": "tester", "orgs": [], "auth": {}})
        return self._error(404, "NotFound", f"no route for {method} /api/{'/'.join(parts)}")

    def _api_repo(self, method, kind, parts, query):
        """/api/models/{repo}/... (kind "") and /api/datasets/{repo}/... (kind "datasets/")."""
        repo_id = "/".join(parts[:2])
        repo, rest = self.state.repos.get(kind + repo_id), parts[2:]
        if repo is None:
            return self._error(404, "RepoNotFound", f"Repository Not Found for url: {kind}{repo_id}")
        if method == "GET" and (not rest or rest[0] == "revision"):
            revision = rest[1] if rest else "main"
            sha = repo.resolve(revision)
            if sha is None:
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
            files = repo.commits[sha]["files"]
            info = {
                "id": repo_id,
                "sha": sha,
                "private": repo.private,
                "gated": False,
                "disabled": False,
                "siblings": [
                    {"rfilename": path, "size": len(data), "blobId": _etag(data)}
                    for path, data in sorted(files.items())
                ],
                "tags": [],
                "lastModified": "2025-01-01T00:00:00.000Z",
            }
            if kind:
                card = files.get("README.md", b"").decode()
                info["cardData"] = yaml.safe_load(card.split("---\n", 2)[1]) if card.startswith("---\n") else {}
            else:
                info["modelId"] = repo_id
            return self._json(200, info)
        if method == "GET" and rest[:1] == ["tree"]:
            sha = repo.resolve(rest[1])
            if sha is None:
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {rest[1]}")
            prefix = "/".join(rest[2:]).strip("/")
            files = repo.commits[sha]["files"]
            if prefix and not any(path.startswith(prefix + "/") for path in files):
                return self._error(404, "EntryNotFound", f"{prefix} is not a folder on {rest[1]}")
            recursive = query.get("recursive", ["false"])[0].lower() in ("1", "true")
            return self._json(200, _tree_entries(files, prefix, recursive))
        if method == "POST" and rest[:1] == ["paths-info"]:
            sha = repo.resolve(rest[1])
            if sha is None:
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {rest[1]}")
            files = repo.commits[sha]["files"]
            body = self._body()
            if self.headers.get("Content-Type", "").startswith("application/json"):
                paths = json.loads(body).get("paths", [])
            else:
                paths = parse_qs(body.decode()).get("paths", [])
            entries = []
            for path in paths:
                path = path.strip("/")
                if path in files:
                    entries.append(_file_entry(path, files[path]))
                elif any(p.startswith(path + "/") for p in files):
                    entries.append({"type": "directory", "path": path, "oid": _etag(path.encode()), "size": 0})
            return self._json(200, entries)
        if method == "POST" and rest[:1] == ["preupload"]:
            payload = json.loads(self._body())
            return self._json(
                200,
                {
                    "files": [
                        {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False, "oid": None}
                        for f in payload["files"]
                    ],
                    "commitOid": None,
                },
            )
        if method == "POST" and rest[:1] == ["commit"]:
            return self._commit(repo_id, repo, rest[1])
        if method == "POST" and rest[:1] == ["branch"]:
            payload = json.loads(self._body() or b"{}")
            if rest[1] in repo.branches:
                return self._error(409, "Conflict", f"branch {rest[1]} already exists")
            repo.branches[rest[1]] = repo.resolve(payload.get("startingPoint") or "main")
            return self._json(200, {})
        return self._error(404, "NotFound", f"no route for {method} /api/{kind or 'models/'}{'/'.join(parts)}")

    def _commit(self, repo_id, repo, revision):
        if revision not in repo.branches:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision} (commits go to a branch)")
        sha = repo.branches[revision]
        files = dict(repo.commits[sha]["files"])
        message = None
        for line in self._body().splitlines():
            item = json.loads(line)
            key, value = item["key"], item["value"]
            if key == "header":
                message = value["summary"]
            elif key == "file":
                files[value["path"]] = base64.b64decode(value["content"])
            elif key == "deletedFile":
                files.pop(value["path"], None)
            elif key == "deletedFolder":
                files = {p: d for p, d in files.items() if not p.startswith(value["path"].rstrip("/") + "/")}
            else:  # lfsFile: preupload answered "regular" for every file, so a client never sends one
                return self._error(400, "BadRequest", f"unsupported commit operation {key!r}")
        new = self.state.new_commit(repo, files, message, sha)
        repo.branches[revision] = new
        return self._json(
            200,
            {
                "commitUrl": f"http://{self.headers['Host']}/{repo_id}/commit/{new}",
                "commitOid": new,
                "pullRequestUrl": None,
            },
        )

    # -- /{repo}/resolve/{rev}/{file} ---------------------------------------------------------------------------------
    def _resolve(self, method, repo_id, revision, path):
        head = method == "HEAD"
        repo = self.state.repos.get(repo_id)
        if repo is None:
            return self._error(404, "RepoNotFound", f"Repository Not Found for url: {repo_id}", head=head)
        sha = repo.resolve(revision)
        if sha is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}", head=head)
        data = repo.commits[sha]["files"].get(path)
        if data is None:
            return self._error(
                404, "EntryNotFound", f"{path} does not exist on {revision}", head=head, **{"X-Repo-Commit": sha}
            )
        headers = {
            "Content-Type": "application/octet-stream",
            "ETag": f'"{_etag(data)}"',
            "X-Repo-Commit": sha,
            "Accept-Ranges": "bytes",
        }
        requested = self.headers.get("Range")
        span = None if head else byte_range(requested, len(data))
        status = 200 if span is None else 416 if span == "unsatisfiable" else 206
        if requested is not None:
            self.state.ranges.append((urlsplit(self.path).path, requested, status))
        if status == 416:
            return self._send(416, b"", {**headers, "Content-Range": f"bytes */{len(data)}"})
        if status == 206:
            first, last = span
            headers["Content-Range"] = f"bytes {first}-{last}/{len(data)}"
            data = data[first : last + 1]
        self._send(status, data, headers, head=head)


@dataclass
class Hub:
    """A running loopback Hub: `endpoint` is its URL, `state` its repositories."""

    endpoint: str
    state: HubState

    def create_dataset_repo(
        self, repo_id: str, configs: dict[str, dict], card_text: str = "", row_group_size: int | None = None
    ) -> None:
        """A dataset repository as `datasets.load_dataset(repo_id, config)` reads it: for each config and split a
        parquet file `{config}/{split}-00000-of-00001.parquet` made from `table` (a pyarrow Table or a dict of
        columns; `row_group_size` rows per row group, pyarrow's default if None), and a README whose `configs:` YAML
        block maps each config's splits to its files."""
        import io

        import pyarrow as pa
        import pyarrow.parquet as pq

        files, card = {}, {"configs": []}
        for config, splits in configs.items():
            data_files = []
            for split, table in splits.items():
                if not isinstance(table, pa.Table):
                    table = pa.table(table)
                buffer = io.BytesIO()
                pq.write_table(table, buffer, row_group_size=row_group_size)
                path = f"{config}/{split}-00000-of-00001.parquet"
                files[path] = buffer.getvalue()
                data_files.append({"split": split, "path": f"{config}/{split}-*"})
            card["configs"].append({"config_name": config, "data_files": data_files})
        files["README.md"] = f"---\n{yaml.safe_dump(card, sort_keys=False)}---\n{card_text}".encode()
        self.create_repo(f"datasets/{repo_id}", files)

    def create_repo(self, key: str, files: dict[str, bytes]) -> None:
        """A public repository holding `files` in one commit on main; `key` is `user/name` for a model repository,
        `datasets/user/name` for a dataset one."""
        with self.state.lock:
            repo = Repo(private=False)
            repo.branches["main"] = self.state.new_commit(repo, files, "add files", None)
            self.state.repos[key] = repo

    def env(self, home) -> dict:
        """Environment for a subprocess that talks to this server only: its own HF_HOME (empty cache, no stored
        token), a dummy write token, Xet off, offline mode off."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HF_TOKEN", "HF_HUB_OFFLINE")}
        env.update(
            HF_ENDPOINT=self.endpoint,
            HF_HOME=str(home),
            HF_HUB_DISABLE_XET="1",
            HF_TOKEN="hf_loopback",
            HF_HUB_DISABLE_TELEMETRY="1",
            HF_HUB_OFFLINE="0",
            HF_HUB_ETAG_TIMEOUT="30",
            HF_HUB_DOWNLOAD_TIMEOUT="60",
        )
        return env


def serve() -> tuple[ThreadingHTTPServer, Hub]:
    state = HubState()
    handler = type("BoundHandler", (Handler,), {"state": state})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, Hub(f"http://127.0.0.1:{server.server_address[1]}", state)


@pytest.fixture(scope="module")
def hub():
    """A loopback Hub for the tests of one module."""
    server, hub = serve()
    yield hub
    server.shutdown()
    server.server_close()
