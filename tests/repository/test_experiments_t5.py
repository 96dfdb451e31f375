"""experiments/t5_places.py, claim (d): the T5 span-corruption cells (ids, order, flags as the T5 script parses
them, the attention of each place in the built model), the committed Unigram tokenizer (rebuilt byte for byte), the
targets' reference point, a real tiny T5 cell through the runner, and the masked-LM cells unchanged by the
generalisation (a script per cell: their commands are still the recorded rows' ones)."""

import hashlib
import json
import shlex
from pathlib import Path

import pytest

import cells
import report
import results_file
import runner
import t5_places
import t5_unigram

ROOT = Path(__file__).resolve().parents[2]

PLACES = {
    "encoder": "encoder.block.0.layer.0.SelfAttention",
    "decoder": "decoder.block.0.layer.0.SelfAttention",
    "cross": "decoder.block.0.layer.1.EncDecAttention",
}
TALKING = {
    "dot-product": set(),
    "th-encoder": {"encoder"},
    "th-decoder": {"decoder"},
    "th-everywhere": {"encoder", "decoder", "cross"},
}


def t5_parser():
    from transformers import HfArgumentParser, TrainingArguments

    from hf_attn_variants.training.model_setup import ModelArguments
    from run_t5_pretraining import DEFAULTS, T5DataArguments

    parser = HfArgumentParser((ModelArguments, T5DataArguments, TrainingArguments))
    parser.set_defaults(**DEFAULTS)
    return parser


def test_t5_cells_order_and_settings():
    """The screens first (rate-major, seed 0, 400 steps with the long cells' 160 warm-up steps), then the long cells
    seed-major (1600 steps, eval every 200, 10% warm-up), all four variants each time, all by the T5 script."""
    defined = t5_places.CELLS
    screens = [c for c in defined if c.size.startswith("screen-")]
    long = [c for c in defined if c.size.endswith("-steps1600")]
    assert defined[: len(screens)] == screens and len(screens) == 3 * 4 and len(long) >= 3 * 4
    assert [c.variant for c in screens] == list(t5_places.VARIANTS) * 3
    assert [c.config["training"]["learning_rate"] for c in screens] == [lr for lr in cells.SCREEN_LRS for _ in "abcd"]
    rule_long = long[:12]
    assert [c.seed for c in rule_long] == [0] * 4 + [1] * 4 + [2] * 4
    for c in defined:
        training = c.config["training"]
        assert c.script == cells.T5_SCRIPT and c.config["script"] == cells.T5_SCRIPT and c.claim == "t5_places"
        assert c.eval_metric == "eval_target_loss" and c.preset == "t5-mini-dot-product"
        assert f"-lr{training['learning_rate']}" in c.size, c.id
        if c in screens:
            assert (c.seed, training["max_steps"], training["eval_steps"], training["warmup_steps"]) == (
                0,
                400,
                100,
                160,
            ), c.id
            assert c.size == f"screen-h16-lr{training['learning_rate']}-warmup160"
        else:
            assert (training["max_steps"], training["eval_steps"], training["warmup_steps"]) == (1600, 200, 0.1)
    ids = [c.id for c in defined]
    assert len(ids) == len(set(ids))
    assert "t5_places/th-encoder/screen-h16-lr1e-3-warmup160/seed0" in ids


def test_t5_cells_parse_with_the_t5_script_and_build_their_places():
    """Each cell's flags are the T5 script's (its parser takes them; the warm-up is in steps for the screens);
    each variant's model has talking heads (the maps' parameters) at its places and dot product elsewhere."""
    from hf_attn_variants import VariantT5ForConditionalGeneration
    from hf_attn_variants.presets import preset_config

    parser = t5_parser()
    built = {}
    for c in t5_places.CELLS:
        model_args, data_args, training = parser.parse_args_into_dataclasses(
            c.flags({"train_file": "t.txt", "validation_file": "v.txt"}, "/tmp/out")
        )
        assert (model_args.preset, data_args.max_seq_length, data_args.noise_density) == (
            "t5-mini-dot-product",
            128,
            0.15,
        )
        assert (training.per_device_train_batch_size, training.weight_decay, training.seed) == (16, 0.01, c.seed)
        assert training.learning_rate == float(c.config["training"]["learning_rate"])
        overrides = json.loads(model_args.config_overrides)
        assert (overrides["num_heads"], overrides["d_kv"]) == (16, 16)
        if c.variant not in built:
            config = preset_config(c.preset, vocab_size=8000, **overrides)
            assert (config.num_layers, config.num_decoder_layers, config.d_model, config.d_ff) == (4, 4, 256, 1024)
            built[c.variant] = VariantT5ForConditionalGeneration(config)
    for variant, model in built.items():
        names = {n for n, _ in model.named_parameters()}
        talking = {place for place, prefix in PLACES.items() if f"{prefix}.core.pre_softmax_proj" in names}
        assert talking == TALKING[variant], variant
        assert all(f"{prefix}.q.weight" in names for prefix in PLACES.values())
        assert 9.3e6 < sum(p.numel() for p in model.parameters()) < 9.5e6
        proj = model.get_parameter(f"{PLACES['encoder']}.core.pre_softmax_proj") if "encoder" in talking else None
        if proj is not None:  # the paper's init, not the identity
            assert not bool((proj.detach() - proj.new_ones(16).diag()).abs().max() < 1e-3)


def test_t5_train_command_and_tokenizer():
    recorded, actual = runner.data_flags(runner.RunnerArguments(), cells.T5_SCRIPT)
    assert recorded["tokenizer_name"] == "examples/data/kjv-unigram-8000"
    assert Path(actual["tokenizer_name"]) == t5_unigram.T5_TOKENIZER
    c = t5_places.CELLS[0]
    words = shlex.split(cells.train_command(c, recorded, f"experiments/runs/{c.id}", ["--use_cpu", "true"]))
    assert words[:4] == ["OMP_NUM_THREADS=1", "HF_HUB_OFFLINE=1", "python", "examples/run_t5_pretraining.py"]
    assert words[words.index("--tokenizer_name") + 1] == "examples/data/kjv-unigram-8000"
    assert words[words.index("--warmup_steps") + 1] == "160" and words[-2:] == ["--use_cpu", "true"]
    # the masked-LM script keeps its WordPiece
    assert runner.data_flags(runner.RunnerArguments())[0]["tokenizer_name"] == "examples/data/kjv-wordpiece-8000"
    with pytest.raises(ValueError, match="unknown script"):
        cells.cell("c", "v", "s", 0, "t5-mini-dot-product", script="examples/run_qa.py")


def test_committed_t5_tokenizer_rebuilds_byte_for_byte(tmp_path):
    """The committed Unigram is what t5_unigram.write trains from the training chapters, and it has T5's
    sentinels (the T5 script's own check)."""
    from transformers import AutoTokenizer

    from hf_attn_variants.training.data_collators import sentinel_ids

    committed = t5_unigram.T5_TOKENIZER / "tokenizer.json"
    assert hashlib.sha256(committed.read_bytes()).hexdigest() == t5_unigram.T5_TOKENIZER_SHA256
    rebuilt = t5_unigram.write(tmp_path / "unigram")
    assert rebuilt.read_bytes() == committed.read_bytes()
    tokenizer = AutoTokenizer.from_pretrained(t5_unigram.T5_TOKENIZER)
    ids = sentinel_ids(tokenizer)
    assert len(tokenizer) == 8000 and ids[0] == 7999 and ids[99] == 7900
    assert (tokenizer.pad_token_id, tokenizer.eos_token_id) == (0, 1)


def test_t5_tables_stall_against_the_targets_unigram():
    """The T5 tables count a run as stalled near the targets' unigram point (5.509), not masked LM's (5.857)."""
    tables = {t.name: t for t in t5_places.TABLES}
    assert set(tables) >= {"t5-screen", "t5-long"}
    assert all(t.reference == t5_unigram.UNIGRAM_TARGET_LOSS == 5.509 for t in tables.values())
    loss = 5.47  # within 0.05 of the targets' point, far below masked LM's
    assert report.is_stalled(loss, t5_unigram.UNIGRAM_TARGET_LOSS) and not report.is_stalled(loss)
    screen = tables["t5-screen"]
    sizes = dict(zip(cells.SCREEN_LRS, (size for _, size in screen.columns)))
    rows = [
        {
            "id": f"t5_places/dot-product/{size}/seed0",
            "claim": "t5_places",
            "variant": "dot-product",
            "size": size,
            "seed": 0,
            "eval_loss": value,
            "diverged": False,
            "eval_curve": [[400, value]],
        }
        for size, value in zip(sizes.values(), (5.40, 5.47, 5.30))
    ]
    assert report.screen_pick(rows, screen, "dot-product", sizes, {}, "fallback") == "2e-3"
    rows[2]["eval_loss"] = 5.48  # stalled: never wins
    assert report.screen_pick(rows, screen, "dot-product", sizes, {}, "fallback") == "5e-4"
    assert "(n=1, 1 stalled)" in report.render_table(rows, screen, {})


def test_t5_screen_picks_follow_the_rule():
    """SCREEN_PICK is what the rule picks from the committed results (None while a rate has no row); the long
    cells train at it; the control is dot product at each other picked rate, seed 0."""
    rows = results_file.load_results(results_file.RESULTS)
    screen = next(t for t in t5_places.TABLES if t.screen)
    sizes = dict(zip(cells.SCREEN_LRS, (size for _, size in screen.columns)))
    for variant, picked in t5_places.SCREEN_PICK.items():
        assert picked == report.screen_pick(rows, screen, variant, sizes, t5_places.ALIASES, cells.PENDING_LR), variant
        lr = cells.PENDING_LR if picked is None else picked
        assert {c.seed for c in t5_places.CELLS if c.variant == variant and c.size == t5_places.long_size(lr)} == {
            0,
            1,
            2,
        }


def test_t5_control_where_the_rates_differ(monkeypatch):
    monkeypatch.setattr(
        t5_places,
        "SCREEN_PICK",
        {"dot-product": "1e-3", "th-encoder": "5e-4", "th-decoder": "1e-3", "th-everywhere": "5e-4"},
    )
    (control,) = t5_places.control_cells()
    assert (control.variant, control.seed, control.size) == ("dot-product", 0, "h16-lr5e-4-steps1600")
    assert control.config["training"]["max_steps"] == 1600
    assert [size for _, size in t5_places.control_table().columns] == ["h16-lr1e-3-steps1600", "h16-lr5e-4-steps1600"]
    monkeypatch.setattr(t5_places, "SCREEN_PICK", dict.fromkeys(t5_places.VARIANTS, "1e-3"))
    assert t5_places.control_cells() == []
    monkeypatch.setattr(t5_places, "SCREEN_PICK", {**dict.fromkeys(t5_places.VARIANTS, "1e-3"), "th-decoder": None})
    assert t5_places.control_cells() == []  # pending


def test_masked_lm_cells_keep_their_commands():
    """The per-cell script changes nothing for the masked-LM claims: their config has no script, and each of their
    rows made with a committed tokenizer has the train_command its cell gives today (a row whose run_pretraining
    took a research optimizer flag runs pretrain_research.py today: `cells.current_command`)."""
    claims = [m for m in report.load_claims() if m.CLAIM != "t5_places"]
    recorded, _ = runner.data_flags(runner.RunnerArguments())
    by_id = {c.id: c for m in claims for c in m.CELLS}
    assert all(c.script == cells.SCRIPT and "script" not in c.config for c in by_id.values())
    checked = 0
    for row in results_file.load_results(results_file.RESULTS):
        c = by_id.get(row["id"])
        if c is None or not row.get("tokenizer_sha256") or row["config"] != json.loads(json.dumps(c.config)):
            continue
        words = shlex.split(row["train_command"].split(" --train_file ")[1])  # past the env and the script
        extra = ["--use_cpu", "true"] if words[-2:] == ["--use_cpu", "true"] else []
        output_dir = words[words.index("--output_dir") + 1]  # where the runner's --runs_dir put it
        assert cells.train_command(c, recorded, output_dir, extra) == cells.current_command(row["train_command"]), c.id
        checked += 1
    assert checked >= 50


def test_tiny_t5_cell_through_the_runner(tmp_path, monkeypatch):
    """A real T5 cell of 2 steps (t5-tiny, its own Unigram of a KJV slice): the row's held-out loss is the T5
    script's target loss, its command the T5 script's."""
    import gzip

    import kjv

    monkeypatch.setenv("HF_ATTN_VARIANTS_CACHE", str(tmp_path / "cache"))
    chapters = kjv.split_documents(gzip.decompress(kjv.ARCHIVE.read_bytes()).decode())["all"]
    train, validation = tmp_path / "train.txt", tmp_path / "validation.txt"
    train.write_text("\n\n".join(chapters[:12]) + "\n")
    validation.write_text("\n\n".join(chapters[12:15]) + "\n")
    tiny = cells.cell(
        "test",
        "tiny-t5",
        "t",
        0,
        "t5-tiny-dot-product",
        {"num_heads": 2, "decoder_attention_type": "talking_heads"},
        script=cells.T5_SCRIPT,
        max_steps=2,
        eval_steps=1,
        logging_steps=1,
        max_seq_length=32,
        max_eval_samples=8,
        per_device_train_batch_size=4,
    )
    argv = [
        "--results",
        str(tmp_path / "results.jsonl"),
        "--runs_dir",
        str(tmp_path / "runs"),
        "--train_file",
        str(train),
        "--validation_file",
        str(validation),
    ]
    assert runner.main([tiny], "experiments/test_claim.py", argv)["run"] == 1
    (row,) = results_file.load_results(tmp_path / "results.jsonl")
    outcome = json.loads((tmp_path / "runs" / "test" / "tiny-t5" / "t" / "seed0" / "all_results.json").read_text())
    assert row["eval_loss"] == pytest.approx(outcome["eval_target_loss"]) and 0 < row["eval_loss"] < 20
    assert [step for step, _ in row["eval_curve"]] == [1, 2] and row["steps"] == 2
    assert row["config"]["script"] == cells.T5_SCRIPT and row["diverged"] is False
    assert shlex.split(row["train_command"])[3] == "examples/run_t5_pretraining.py"
    (trained,) = (tmp_path / "cache" / "tokenizers").glob("unigram-*/tokenizer.json")
    assert row["tokenizer_sha256"] == hashlib.sha256(trained.read_bytes()).hexdigest()
