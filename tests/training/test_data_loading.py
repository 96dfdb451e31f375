"""The example scripts' shared data loading (hf_attn_variants.training.data_loading: load_raw_datasets and its helpers), from local
files of every format, the embedded default, and dataset repositories on the loopback Hub (tests/hub_server.py)."""

import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from transformers import TrainingArguments

from conftest import run_with_hub
from hf_attn_variants.training.data_loading import (
    DataArguments,
    check_streaming,
    load_raw_datasets,
    map_batched,
    pick_column,
)
from hub_server import byte_range
from run_pretraining import CORPUS

ROWS = [{"text": f"row {i} of the table", "label": i % 3} for i in range(40)]


def write(path: Path, rows: list[dict]) -> Path:
    """`rows` as a file of the format its extension names."""
    if path.suffix == ".txt":
        path.write_text("".join(r["text"] + "\n" for r in rows))
    elif path.suffix in (".csv", ".tsv"):
        sep = "\t" if path.suffix == ".tsv" else ","
        path.write_text("text" + sep + "label\n" + "".join(f"{r['text']}{sep}{r['label']}\n" for r in rows))
    elif path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.mark.parametrize("suffix", [".txt", ".csv", ".tsv", ".jsonl", ".parquet"])
def test_local_files_of_every_format(tmp_path, suffix):
    args = DataArguments(
        train_file=str(write(tmp_path / f"train{suffix}", ROWS)), validation_split_percentage=10, max_eval_samples=2
    )
    raw = load_raw_datasets(args, default_files=None, seed=0, cache_dir=tmp_path / "cache")
    assert set(raw) == {"train", "validation"}
    assert len(raw["train"]) == 36 and len(raw["validation"]) == 2
    texts = set(raw["train"]["text"])
    assert texts.isdisjoint(raw["validation"]["text"]) and texts <= {r["text"] for r in ROWS}
    if suffix != ".txt":
        assert raw["train"].column_names == ["text", "label"]
    # the split is seeded: the same rows held out again, other rows with another seed
    again = load_raw_datasets(args, default_files=None, seed=0, cache_dir=tmp_path / "cache")
    other = load_raw_datasets(args, default_files=None, seed=1, cache_dir=tmp_path / "cache")
    assert again["validation"]["text"] == raw["validation"]["text"] != other["validation"]["text"]


def test_given_validation_file_and_sample_limits(tmp_path):
    args = DataArguments(
        train_file=str(write(tmp_path / "a.jsonl", ROWS)),
        validation_file=str(write(tmp_path / "b.jsonl", ROWS[:5])),
        test_file=str(write(tmp_path / "c.jsonl", ROWS[5:9])),
        max_train_samples=7,
        max_predict_samples=3,
    )
    raw = load_raw_datasets(args, default_files=None, seed=0, cache_dir=tmp_path / "cache")
    assert {k: len(v) for k, v in raw.items()} == {"train": 7, "validation": 5, "test": 3}
    assert raw["train"]["text"] == [r["text"] for r in ROWS[:7]]  # the first N, in order


def test_embedded_default_and_blocks_of_rows(tmp_path):
    raw = load_raw_datasets(
        DataArguments(), default_files={"train": CORPUS}, seed=42, cache_dir=tmp_path, validation_block_rows=8
    )
    lines = CORPUS.read_text().splitlines()
    assert len(raw["train"]) + len(raw["validation"]) == len(lines)
    held = raw["validation"]["text"]
    assert len(held) % 8 == 0 and 0.03 < len(held) / len(lines) < 0.07
    start = lines.index(held[0])  # blocks of 8 consecutive lines stay together
    assert held[:8] == lines[start : start + 8]


def test_streaming_holds_out_the_same_rows_each_pass(tmp_path):
    args = DataArguments(
        train_file=str(write(tmp_path / "t.txt", ROWS * 5)), streaming=True, validation_split_percentage=20
    )
    raw = load_raw_datasets(args, default_files=None, seed=0, cache_dir=tmp_path / "cache")
    train, validation = ([r["text"] for r in raw[s]] for s in ("train", "validation"))
    assert len(train) + len(validation) == 200 and 20 <= len(validation) <= 60
    assert [r["text"] for r in raw["validation"]] == validation
    with pytest.raises(ValueError, match="--streaming needs --max_steps"):
        check_streaming(TrainingArguments(str(tmp_path), max_steps=-1), args)
    check_streaming(TrainingArguments(str(tmp_path), max_steps=5), args)


def test_map_batched_uses_the_cache(tmp_path):
    args = DataArguments(train_file=str(write(tmp_path / "t.csv", ROWS)), validation_split_percentage=0)
    training_args = TrainingArguments(str(tmp_path / "out"))
    log = tmp_path / "calls.log"  # the function logs its calls to a file (state in a closure would change its hash)

    def upper(batch, log):
        with open(log, "a") as file:
            file.write(f"{len(batch['text'])}\n")
        return {"text": [t.upper() for t in batch["text"]]}

    def prepare(overwrite):
        args.overwrite_cache = overwrite
        raw = load_raw_datasets(args, default_files=None, seed=0, cache_dir=tmp_path / "cache")
        return map_batched(raw["train"], upper, training_args, args, desc="upper", fn_kwargs={"log": str(log)})

    first = prepare(False)
    assert first[0]["text"] == "ROW 0 OF THE TABLE" and log.read_text().split() == ["40"]
    second = prepare(False)  # read from the cache: the function does not run again
    assert log.read_text().split() == ["40"] and second.cache_files == first.cache_files
    prepare(True)  # --overwrite_cache: it runs again
    assert log.read_text().split() == ["40", "40"]


@pytest.mark.parametrize(
    "args,error,match",
    [
        (
            dict(train_file="/nonexistent/train.txt"),
            FileNotFoundError,
            "--train_file /nonexistent/train.txt: no such file",
        ),
        (dict(train_file=str(CORPUS), validation_file="/nonexistent/v.csv"), FileNotFoundError, "--validation_file"),
        (dict(train_file=str(CORPUS.with_suffix(".xml"))), None, "unknown extension '.xml'"),
        (dict(dataset_config_name="x"), ValueError, "--dataset_config_name needs --dataset_name"),
        (dict(dataset_name="x", train_file=str(CORPUS)), ValueError, "not both"),
    ],
)
def test_bad_data_arguments(tmp_path, args, error, match):
    if match.startswith("unknown extension"):
        args["train_file"] = str(write(tmp_path / "t.txt", ROWS).rename(tmp_path / "t.xml"))
        error = ValueError
    with pytest.raises(error, match=match):
        load_raw_datasets(DataArguments(**args), default_files={"train": CORPUS}, seed=0, cache_dir=tmp_path)


def test_missing_column_names_the_flag(tmp_path):
    raw = load_raw_datasets(
        DataArguments(train_file=str(write(tmp_path / "t.jsonl", ROWS))),
        default_files=None,
        seed=0,
        cache_dir=tmp_path / "cache",
    )
    assert pick_column(raw["train"], None, "--text_column_name", "text") == "text"
    assert pick_column(raw["train"].remove_columns("text"), None, "--text_column_name", "text") == "label"
    with pytest.raises(
        ValueError,
        match=r"--text_column_name body: the data has no such column; its columns are "
        r"\['text', 'label'\]",
    ):
        pick_column(raw["train"], "body", "--text_column_name")


HUB_LOAD = """
import json
from hf_attn_variants.training.data_loading import DataArguments, load_raw_datasets
for config, streaming in [("lines", False), ("lines", True), ("docs", False), ("nope", False)]:
    args = DataArguments(dataset_name="tester/corpus", dataset_config_name=config, streaming=streaming)
    try:
        raw = load_raw_datasets(args, default_files=None, seed=0)
    except ValueError as error:
        print(json.dumps("ERROR " + str(error)))
    else:
        print(json.dumps({{split: [row["text"] for row in raw[split]] for split in raw}}))
"""


def test_dataset_repository_on_the_loopback_hub(hub, tmp_path):
    """load_dataset("tester/corpus", cfg) through the loopback Hub's dataset API: the README's configs, parquet files;
    map-style and streaming; a config the dataset lacks is an error listing the ones it has."""
    hub.create_dataset_repo(
        "tester/corpus",
        {
            "lines": {"train": {"text": ["one", "two", "three"]}, "validation": {"text": ["four"]}},
            "docs": {"train": {"text": [f"doc {i}" for i in range(20)]}},
        },
    )
    proc = run_with_hub(hub, tmp_path / "hf_home", [sys.executable, "-c", HUB_LOAD.format()])
    lines, streamed, docs, nope = map(json.loads, proc.stdout.strip().splitlines()[-4:])
    assert lines == streamed == {"train": ["one", "two", "three"], "validation": ["four"]}
    assert len(docs["validation"]) == 1 and sorted(docs["train"] + docs["validation"]) == sorted(
        f"doc {i}" for i in range(20)
    )  # no validation split: 5% carved from train
    assert nope == (
        "ERROR The dataset tester/corpus has no configuration 'nope': pass --dataset_config_name one "
        "of ['lines', 'docs']."
    )
    assert ("GET", "/datasets/tester/corpus/resolve/main/README.md") in hub.state.requests


def test_loopback_hub_serves_range_requests(hub):
    """RFC 9110 ranges on /resolve: one range gives 206 with Content-Range; a suffix and an open end; a range past the
    end 416 with the size; several ranges, another unit or a malformed header the whole file (200)."""
    import urllib.error
    import urllib.request

    data = bytes(range(256)) * 4  # 1024 bytes
    hub.create_repo("tester/blobs", {"blob.bin": data})
    url = f"{hub.endpoint}/tester/blobs/resolve/main/blob.bin"

    def get(range_header=None, method="GET"):
        headers = {"Range": range_header} if range_header else {}
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers, method=method)) as response:
                return response.status, response.headers, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.headers, error.read()

    status, headers, body = get(method="HEAD")
    assert (status, headers["Accept-Ranges"], headers["Content-Length"], body) == (200, "bytes", "1024", b"")
    for header, first, last in [
        ("bytes=0-9", 0, 9),
        ("bytes=1000-", 1000, 1023),
        ("bytes=-24", 1000, 1023),
        ("bytes=1000-5000", 1000, 1023),
        ("bytes=512-512", 512, 512),
    ]:
        status, headers, body = get(header)
        assert status == 206, header
        assert headers["Content-Range"] == f"bytes {first}-{last}/1024", header
        assert body == data[first : last + 1] and headers["Content-Length"] == str(last + 1 - first), header
    for header in ["bytes=1024-", "bytes=-0"]:
        status, headers, body = get(header)
        assert (status, headers["Content-Range"], body) == (416, "bytes */1024", b""), header
    for header in ["bytes=0-9,20-29", "items=0-9", "bytes=9-0", "bytes=x-", "bytes=-"]:
        status, headers, body = get(header)
        assert (status, body) == (200, data) and "Content-Range" not in headers, header
    logged = [(header, status) for path, header, status in hub.state.ranges if path.endswith("/blob.bin")]
    assert logged[:3] == [("bytes=0-9", 206), ("bytes=1000-", 206), ("bytes=-24", 206)] and len(logged) == 12


STREAM_LOAD = """
import json
from hf_attn_variants.training.data_loading import DataArguments, load_raw_datasets
raw = load_raw_datasets(DataArguments(dataset_name="tester/big", streaming=True), default_files=None, seed=0)
assert type(raw["train"]).__name__ == "IterableDataset", type(raw["train"])
with open({out!r}, "w") as f:
    json.dump([row["text"] for row in raw["train"]], f)
"""


def test_streaming_reads_a_large_parquet_file_through_range_requests(hub, tmp_path):
    """--streaming on a dataset repository whose parquet file is 5 MB in 4 row groups: datasets reads it with HTTP
    Range requests (the footer, then the row groups), answered 206, and the rows streamed are the file's, in order.
    (A server that ignores Range hands the whole file to the footer read, and the parquet reader fails.)"""
    import hashlib

    # 128 hex characters a row: nearly incompressible, so the file is as large as its text
    rows = [hashlib.sha256(b"%d" % i).hexdigest() + hashlib.sha256(b"-%d" % i).hexdigest() for i in range(40_000)]
    hub.create_dataset_repo(
        "tester/big", {"default": {"train": {"text": rows}, "validation": {"text": rows[:8]}}}, row_group_size=10_000
    )
    path = "default/train-00000-of-00001.parquet"
    size = len(hub.state.files("datasets/tester/big")[path])
    assert size > 5_000_000
    out = tmp_path / "streamed.json"
    run_with_hub(hub, tmp_path / "hf_home", [sys.executable, "-c", STREAM_LOAD.format(out=str(out))])
    assert json.loads(out.read_text()) == rows
    ranges = [(header, status) for url, header, status in hub.state.ranges if url.endswith(path)]
    assert ranges and all(status == 206 for _, status in ranges), ranges
    spans = [byte_range(header, size) for header, _ in ranges]
    assert any(first > 0 for first, _ in spans), spans  # a read that starts inside the file: the footer
    assert all(last - first + 1 < size for first, last in spans), spans  # no request took the whole file
