"""Loading a saved checkpoint as remote code where the package cannot be imported: the harness the remote-code,
Admin, compatibility and scale-out tests share (a checkpoint saved with its expected outputs, then loaded through
`AutoModel*` with `trust_remote_code=True` in a fresh interpreter that cannot import `hf_attn_variants`)."""

import json
import sys
import textwrap

import torch

from conftest import FAMILIES, build, family, head_inputs, head_kind
from hf_attn_variants.isolation import run_isolated

AUTO_CLASS = {
    "Model": "AutoModel",
    "ForPreTraining": "AutoModelForPreTraining",
    "ForMaskedLM": "AutoModelForMaskedLM",
    "LMHeadModel": "AutoModelForCausalLM",
    "ForNextSentencePrediction": "AutoModelForNextSentencePrediction",
    "ForSequenceClassification": "AutoModelForSequenceClassification",
    "ForMultipleChoice": "AutoModelForMultipleChoice",
    "ForTokenClassification": "AutoModelForTokenClassification",
    "ForQuestionAnswering": "AutoModelForQuestionAnswering",
    "ForConditionalGeneration": "AutoModelForSeq2SeqLM",
    "EncoderModel": "AutoModelForTextEncoding",
}


def auto_class(head: str) -> str:
    return AUTO_CLASS[head_kind(head)]


# Runs in a fresh interpreter whose sys.path cannot reach the package (the import is checked to fail first).
LOADER = textwrap.dedent(
    """
    import json, sys, torch, transformers
    try:
        import hf_attn_variants
    except ImportError:
        pass
    else:
        raise SystemExit("hf_attn_variants is importable: the test would prove nothing")
    jobs = json.load(open(sys.argv[1]))
    for job in jobs:
        auto = getattr(transformers, job["auto"])
        config = transformers.AutoConfig.from_pretrained(job["path"], trust_remote_code=True)
        assert type(config).__name__ == job["config"], type(config)
        model = auto.from_pretrained(job["path"], trust_remote_code=True).eval()
        assert type(model).__name__ == job["cls"], (type(model).__name__, job["cls"])
        inputs = torch.load(job["inputs"])
        with torch.no_grad():
            out = model(**inputs)
        torch.save({k: v for k, v in out.items() if isinstance(v, torch.Tensor)}, job["out"])
    print("loaded", len(jobs))
    """
)


def load_isolated(tmp_path, jobs, python=sys.executable, loader=LOADER):
    """Run `loader` over `jobs` where the package cannot be imported, in a fresh `python` (another virtual
    environment's, for the compatibility check)."""
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    proc = run_isolated(loader, [tmp_path / "jobs.json"], python=python, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert f"loaded {len(jobs)}" in proc.stdout


def save_checkpoint(tmp_path, head, variant, model=None):
    if model is None:
        model = build(head, variant)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.01 * torch.randn_like(p))
    path = tmp_path / f"{variant}-{head}"
    model.save_pretrained(path)
    inputs = head_inputs(head)
    torch.save(inputs, path / "inputs.pt")
    with torch.no_grad():
        expected = {k: v for k, v in model(**inputs).items() if isinstance(v, torch.Tensor)}
    job = dict(
        path=str(path),
        auto=auto_class(head),
        cls=head,
        config=FAMILIES[family(head)].config_class.__name__,
        inputs=str(path / "inputs.pt"),
        out=str(path / "out.pt"),
    )
    return job, expected
