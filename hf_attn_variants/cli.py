"""The `hf-attn-variants` command: publish, convert and export checkpoints. Package-only.

    hf-attn-variants publish out/bert-mini-talking-heads me/bert-mini-talking-heads --private
    hf-attn-variants convert path/to/bert-checkpoint bert-talking-heads --attention talking_heads
    hf-attn-variants export my-admin-bert my-admin-bert-plain

Each subcommand calls one function: `publish.publish`, `convert.convert`, `convert.export_admin`.
"""

import argparse
import sys


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

    convert = commands.add_parser("convert", help="transformers BERT/ALBERT/T5 checkpoint -> variant checkpoint "
                                                  "with the same outputs")
    convert.add_argument("source", help="folder written by transformers' save_pretrained")
    convert.add_argument("output", help="new (or empty) output folder")
    convert.add_argument("--attention", default="talking_heads",
                         choices=["talking_heads", "synthesizer", "dot_product"],
                         help="talking_heads: identity head maps; synthesizer: zero-start mixture with dot product")
    convert.add_argument("--synthesizer-components", nargs="+", default=["dot_product", "random"],
                         help="mixture components for --attention synthesizer (must include dot_product)")
    convert.add_argument("--architecture", help="transformers class to convert, e.g. BertForMaskedLM "
                                                "(default: config.json's architectures)")

    export = commands.add_parser("export", help="Admin variant checkpoint -> plain transformers checkpoint "
                                                "(where exact)")
    export.add_argument("source", help="a dot-product VariantBert/VariantAlbert checkpoint with admin=True")
    export.add_argument("output", help="new (or empty) output folder")
    return parser


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "publish":
            from .publish import publish

            done = publish(args.folder, args.repo_id, private=args.private, revision=args.revision,
                           commit_message=args.commit_message, token=args.token, license=args.license,
                           base_model=args.base_model)
            print(f"Published {done.url} (model commit {done.model_commit}, card commit {done.card_commit})")
        elif args.command == "convert":
            from .convert import convert

            out = convert(args.source, args.output, args.attention,
                          synthesizer_components=args.synthesizer_components, architecture=args.architecture)
            print(f"Wrote {out} (outputs verified equal to {args.source}; the variant's new parameters start at "
                  "values that preserve the function)")
        else:
            from .convert import export_admin

            out = export_admin(args.source, args.output)
            print(f"Wrote {out} (outputs verified equal to {args.source})")
    except (FileNotFoundError, FileExistsError, ValueError, RuntimeError) as error:
        print(f"hf-attn-variants {args.command}: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
