"""The `hf-attn-variants` command: publish, convert, export and draw checkpoints. Package-only.

    hf-attn-variants publish out/bert-mini-talking-heads me/bert-mini-talking-heads --private
    hf-attn-variants convert path/to/bert-checkpoint bert-talking-heads
    hf-attn-variants export my-admin-bert my-admin-bert-plain
    hf-attn-variants draw outputs/bert-mini-talking-heads --out pictures --text "A cynic is a blackguard."

Each subcommand calls one function: `publish.publish`, `convert.convert`, `convert.export_admin`,
`visualize.draw_checkpoint`; `convert`'s choices and defaults are the function's (its attention types with a warm
start; their help from `attention_tools`). It reads only what its arguments name (no file of a repository
checkout), so it runs from any folder.
"""

import argparse
import inspect
import sys

from .attention_tools import warm_start_help
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

    convert = commands.add_parser(
        "convert", help="transformers BERT/ALBERT/T5 checkpoint -> variant checkpoint with the same outputs"
    )
    convert.add_argument("source", help="folder written by transformers' save_pretrained")
    convert.add_argument("output", help="new (or empty) output folder")
    defaults = inspect.signature(convert_checkpoint).parameters  # convert's own defaults
    convert.add_argument(
        "--attention",
        default=defaults["attention_type"].default,
        choices=list(FUNCTION_PRESERVING),
        help="; ".join(f"{name}: {warm_start_help(name)}" for name in FUNCTION_PRESERVING)
        + f" (default {defaults['attention_type'].default})",
    )
    convert.add_argument(
        "--synthesizer-components",
        nargs="+",
        default=list(defaults["synthesizer_components"].default),
        help="mixture components of a synthesizer (must include dot_product)",
    )
    convert.add_argument(
        "--architecture",
        help="transformers class to convert, e.g. BertForMaskedLM (default: config.json's architectures)",
    )

    export = commands.add_parser(
        "export", help="Admin variant checkpoint -> plain transformers checkpoint (where exact)"
    )
    export.add_argument("source", help="a dot-product VariantBert/VariantAlbert checkpoint with admin=True")
    export.add_argument("output", help="new (or empty) output folder")

    draw = commands.add_parser(
        "draw",
        help="draw what a model's attention learned to PNG: talking heads' P_l/P_w, "
        "a synthesizer's alignments (needs matplotlib)",
    )
    draw.add_argument(
        "folder", help="a checkpoint folder of this package (config.json, weights; with --text, its tokenizer)"
    )
    draw.add_argument("--out", required=True, help="folder for the PNG files (created)")
    draw.add_argument(
        "--text",
        help="an input: draws input-dependent synthesizer components (dense, dot product) and "
        "the softmax weights for it, labelled with its tokens",
    )
    draw_defaults = inspect.signature(draw_checkpoint).parameters  # draw's own defaults
    draw.add_argument(
        "--length",
        type=int,
        default=draw_defaults["length"].default,
        help="positions of input-free synthesizer maps (Random) without --text "
        f"(default {draw_defaults['length'].default})",
    )
    draw.add_argument(
        "--dpi",
        type=int,
        default=draw_defaults["dpi"].default,
        help=f"resolution of the PNG files (default {draw_defaults['dpi'].default})",
    )
    return parser


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "publish":
            from .hub.publish import publish

            done = publish(
                args.folder,
                args.repo_id,
                private=args.private,
                revision=args.revision,
                commit_message=args.commit_message,
                token=args.token,
                license=args.license,
                base_model=args.base_model,
            )
            print(f"Published {done.url} (model commit {done.model_commit}, card commit {done.card_commit})")
        elif args.command == "convert":
            out = convert_checkpoint(
                args.source,
                args.output,
                args.attention,
                synthesizer_components=args.synthesizer_components,
                architecture=args.architecture,
            )
            print(
                f"Wrote {out} (outputs verified equal to {args.source}; the variant's new parameters start at "
                "values that preserve the function)"
            )
        elif args.command == "draw":
            for path in draw_checkpoint(args.folder, args.out, text=args.text, length=args.length, dpi=args.dpi):
                print(f"Wrote {path}")
        else:
            out = export_admin(args.source, args.output)
            print(f"Wrote {out} (outputs verified equal to {args.source})")
    except (FileNotFoundError, FileExistsError, ValueError, RuntimeError, ImportError) as error:
        print(f"hf-attn-variants {args.command}: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
