"""The checkpoints hf-attn-variants releases, and their model cards in the repository's top-level `model_cards/`: the
command line. Repository tooling, not part of the installed package: it reads this checkout's research results and
run records. It imports the installed package (`pip install -e .`) and reads this checkout's folders wherever it runs.

    python utils/release.py cards               # every card and the index, rendered again from the recorded runs
    python utils/release.py record OUTPUT_DIR NAME --train-command "..." --commit SHA --file examples/data/x.txt
    python utils/release.py publish OUTPUT_DIR me/NAME --release NAME   # a re-trained checkpoint, its release card

By job, beside it: `release_set.py` (the release set, `RELEASES`: the README's main job, per attention type the
masked-LM research cell that `RESEARCH_RULE` picks from experiments/results.jsonl, and the T5 span-corruption cell
that `T5_RULE` picks), `run_records.py` (each release's record: a committed one, `model_cards/records/<name>.json`,
written by `record_run` from a run's output folder, or one made from its research row; config, metrics, training
record, hashes, command, commit; never the weights) and `release_cards.py` (the cards, rendered by
`hf_attn_variants.hub.cards.render_record` from the records, each saying how to train the weights again, and their
index). `publish` uploads a checkpoint with its release card through `hf_attn_variants.hub.publish.publish`.
"""

import argparse
import json
import sys
from pathlib import Path

from hf_attn_variants.hub.publish import publish
from release_cards import release_record, write_cards
from release_set import CARDS, OWNER, RECORDS, RESULTS, ROOT
from run_records import check_matches, record_run, release_set

# -- the command line -----------------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python utils/release.py", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    cards = commands.add_parser("cards", help="render the cards of the release set and their index (model_cards/)")
    cards.add_argument("--out", default=str(ROOT / CARDS), help=f"output folder (default: this checkout's {CARDS})")
    _sources(cards)

    record = commands.add_parser(
        "record",
        help="write the committed record of a run (its card's data, command, "
        "commit and hashes; no weights) into the records folder",
    )
    record.add_argument("folder", help="the run's output folder")
    record.add_argument("name", help="the record's name (records/<name>.json), e.g. bert-mini-talking-heads")
    record.add_argument("--train-command", required=True, help="the exact command that made the folder")
    record.add_argument("--commit", required=True, help="the git commit of the code that ran")
    record.add_argument(
        "--file",
        action="append",
        default=[],
        help="a data file the run read, as its command names it (relative to the checkout's root): hashed; repeatable",
    )
    record.add_argument(
        "--records", default=str(ROOT / RECORDS), help=f"records folder (default: this checkout's {RECORDS})"
    )

    upload = commands.add_parser(
        "publish",
        help="check that a checkpoint folder is a release's model, upload it to "
        "the Hub with the release's committed card (addressed and pinned)",
    )
    upload.add_argument("folder", help="the checkpoint folder: the output folder of the command its card gives")
    upload.add_argument("repo_id", help="Hub repository, e.g. me/bert-mini-kjv-talking-heads")
    upload.add_argument("--release", required=True, help="the release, e.g. bert-mini-kjv-talking-heads")
    upload.add_argument("--private", action="store_true", help="create the repository private")
    upload.add_argument("--revision", help="branch to publish to (created if missing); default main")
    upload.add_argument("--commit-message", help="message of the model commit")
    upload.add_argument("--token", help="Hub token (default: the logged-in one, or HF_TOKEN)")
    upload.add_argument(
        "--cards", default=str(ROOT / CARDS), help=f"the committed cards (default: this checkout's {CARDS})"
    )
    _sources(upload)
    return parser


def _sources(parser) -> None:
    parser.add_argument(
        "--results", default=str(ROOT / RESULTS), help=f"research results (default: this checkout's {RESULTS})"
    )
    parser.add_argument(
        "--records", default=str(ROOT / RECORDS), help=f"run records (default: this checkout's {RECORDS})"
    )
    parser.add_argument("--owner", default=OWNER, help=f"Hub namespace of the cards (default {OWNER})")


def _publish(args) -> str:
    record = release_record(
        args.release, results=args.results, records=args.records, cards=args.cards, owner=args.owner
    )
    check_matches(args.folder, record, args.release)
    done = publish(
        args.folder,
        args.repo_id,
        private=args.private,
        revision=args.revision,
        commit_message=args.commit_message,
        token=args.token,
        record=record,
    )
    return f"Published {done.url} (model commit {done.model_commit}, card commit {done.card_commit})"


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "cards":
            released = release_set(results=args.results, records=args.records)
            for path in write_cards(args.out, released, owner=args.owner):
                print(f"Wrote {path}")
        elif args.command == "record":
            path = Path(args.records) / f"{args.name}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(
                json.dumps(record_run(args.folder, args.train_command, args.commit, args.file), indent=2) + "\n"
            )
            print(f"Wrote {path}")
        else:
            print(_publish(args))
    except (FileNotFoundError, FileExistsError, ValueError, RuntimeError) as error:
        print(f"release.py {args.command}: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
