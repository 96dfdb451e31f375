"""The `hf-attn-variants` command: publish, convert, export and draw checkpoints; render release cards. Package-only.

    hf-attn-variants publish out/bert-mini-talking-heads me/bert-mini-talking-heads --private
    hf-attn-variants publish out/kjv-th me/bert-mini-kjv-talking-heads --release bert-mini-kjv-talking-heads
    hf-attn-variants convert path/to/bert-checkpoint bert-talking-heads
    hf-attn-variants export my-admin-bert my-admin-bert-plain
    hf-attn-variants cards --out model_cards
    hf-attn-variants record outputs/bert-mini-talking-heads bert-mini-talking-heads --train-command "..." --commit SHA
    hf-attn-variants draw outputs/bert-mini-talking-heads --out pictures --text "A cynic is a blackguard."

Each subcommand calls one function: `publish.publish`, `convert.convert`, `convert.export_admin`,
`release.write_cards`, `release.record_run`, `visualize.draw_checkpoint`; `convert`'s choices and defaults are the
function's (its attention types with a warm start; their help from `ATTENTION_REGISTRY`). `cards`, `record` and
`publish --release` read the repository's files relative to the current folder (run them from its root).
"""

import argparse
import inspect
import json
import sys
from pathlib import Path

from . import release
from .configuration_variant_attention import ATTENTION_REGISTRY
from .convert import FUNCTION_PRESERVING, export_admin
from .convert import convert as convert_checkpoint
from .visualize import draw_checkpoint


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hf-attn-variants", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    publish = commands.add_parser("publish", help="check a checkpoint folder, upload it to the Hub with its card")
    publish.add_argument("folder", help="checkpoint folder (config.json, weights, code; tokenizer and metrics used)")
    publish.add_argument("repo_id", help="Hub repository, e.g. me/bert-mini-talking-heads")
    publish.add_argument("--private", action="store_true", help="create the repository private")
    publish.add_argument("--revision", help="branch to publish to (created if missing); default main")
    publish.add_argument("--commit-message", help="message of the model commit")
    publish.add_argument("--license", default="apache-2.0", help="license id for the card (default apache-2.0)")
    publish.add_argument("--base-model", help="Hub id of the model this one started from (for the card)")
    publish.add_argument("--token", help="Hub token (default: the logged-in one, or HF_TOKEN)")
    publish.add_argument("--release", help="a release of model_cards/ (e.g. bert-mini-kjv-talking-heads): the folder "
                                           "must be its model; the card is its committed one, addressed and pinned")
    _release_sources(publish)

    cards = commands.add_parser("cards", help="render the cards of the release set and their index (model_cards/)")
    cards.add_argument("--out", default=release.CARDS, help=f"output folder (default {release.CARDS})")
    _release_sources(cards)

    record = commands.add_parser("record", help="write the committed record of a run (its card's data, command, "
                                                "commit and hashes; no weights) into the records folder")
    record.add_argument("folder", help="the run's output folder")
    record.add_argument("name", help="the record's name (records/<name>.json), e.g. bert-mini-talking-heads")
    record.add_argument("--train-command", required=True, help="the exact command that made the folder")
    record.add_argument("--commit", required=True, help="the git commit of the code that ran")
    record.add_argument("--file", action="append", default=[], help="a data file the run read (hashed); repeatable")
    record.add_argument("--records", default=release.RECORDS, help=f"records folder (default {release.RECORDS})")

    convert = commands.add_parser("convert", help="transformers BERT/ALBERT/T5 checkpoint -> variant checkpoint "
                                                  "with the same outputs")
    convert.add_argument("source", help="folder written by transformers' save_pretrained")
    convert.add_argument("output", help="new (or empty) output folder")
    defaults = inspect.signature(convert_checkpoint).parameters  # convert's own defaults
    convert.add_argument("--attention", default=defaults["attention_type"].default, choices=list(FUNCTION_PRESERVING),
                         help="; ".join(f"{name}: {ATTENTION_REGISTRY[name].warm_start_help}"
                                        for name in FUNCTION_PRESERVING)
                         + f" (default {defaults['attention_type'].default})")
    convert.add_argument("--synthesizer-components", nargs="+",
                         default=list(defaults["synthesizer_components"].default),
                         help="mixture components of a synthesizer (must include dot_product)")
    convert.add_argument("--architecture", help="transformers class to convert, e.g. BertForMaskedLM "
                                                "(default: config.json's architectures)")

    export = commands.add_parser("export", help="Admin variant checkpoint -> plain transformers checkpoint "
                                                "(where exact)")
    export.add_argument("source", help="a dot-product VariantBert/VariantAlbert checkpoint with admin=True")
    export.add_argument("output", help="new (or empty) output folder")

    draw = commands.add_parser("draw", help="draw what a model's attention learned to PNG: talking heads' P_l/P_w, "
                                            "a synthesizer's alignments (needs matplotlib)")
    draw.add_argument("folder", help="a checkpoint folder of this package (config.json, weights; with --text, its "
                                     "tokenizer)")
    draw.add_argument("--out", required=True, help="folder for the PNG files (created)")
    draw.add_argument("--text", help="an input: draws input-dependent synthesizer components (dense, dot product) and "
                                     "the softmax weights for it, labelled with its tokens")
    draw_defaults = inspect.signature(draw_checkpoint).parameters  # draw's own defaults
    draw.add_argument("--length", type=int, default=draw_defaults["length"].default,
                      help="positions of input-free synthesizer maps (Random) without --text "
                           f"(default {draw_defaults['length'].default})")
    draw.add_argument("--dpi", type=int, default=draw_defaults["dpi"].default,
                      help=f"resolution of the PNG files (default {draw_defaults['dpi'].default})")
    return parser


def _release_sources(parser) -> None:
    parser.add_argument("--results", default=release.RESULTS, help=f"research results (default {release.RESULTS})")
    parser.add_argument("--records", default=release.RECORDS, help=f"run records (default {release.RECORDS})")
    parser.add_argument("--cards", default=release.CARDS, help=f"the committed cards (default {release.CARDS})")
    parser.add_argument("--owner", default=release.OWNER, help=f"Hub namespace of the cards (default {release.OWNER})")


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "publish":
            from .publish import publish

            record = None
            if args.release:
                record = release.release_record(args.release, results=args.results, records=args.records,
                                                cards=args.cards, owner=args.owner)
                release.check_matches(args.folder, record, args.release)
            done = publish(args.folder, args.repo_id, private=args.private, revision=args.revision,
                           commit_message=args.commit_message, token=args.token, license=args.license,
                           base_model=args.base_model, record=record)
            print(f"Published {done.url} (model commit {done.model_commit}, card commit {done.card_commit})")
        elif args.command == "convert":
            out = convert_checkpoint(args.source, args.output, args.attention,
                          synthesizer_components=args.synthesizer_components, architecture=args.architecture)
            print(f"Wrote {out} (outputs verified equal to {args.source}; the variant's new parameters start at "
                  "values that preserve the function)")
        elif args.command == "cards":
            released = release.release_set(results=args.results, records=args.records)
            for path in release.write_cards(args.out, released, owner=args.owner):
                print(f"Wrote {path}")
        elif args.command == "record":
            path = Path(args.records) / f"{args.name}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            data = release.record_run(args.folder, args.train_command, args.commit, args.file)
            path.write_text(json.dumps(data, indent=2) + "\n")
            print(f"Wrote {path}")
        elif args.command == "draw":
            for path in draw_checkpoint(args.folder, args.out, text=args.text, length=args.length, dpi=args.dpi):
                print(f"Wrote {path}")
        else:
            out = export_admin(args.source, args.output)
            print(f"Wrote {out} (outputs verified equal to {args.source})")
    except (FileNotFoundError, FileExistsError, ValueError, RuntimeError) as error:
        print(f"hf-attn-variants {args.command}: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
