"""``python -m specdec_core prepare|where``: set up the offline model files (``make setup`` runs it)."""

from __future__ import annotations

import argparse

from .assets import AssetMissingError, cache_dir, ensure_target_dir, find_gguf_source


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specdec_core", description="Prepare the course's offline model files.")
    parser.add_argument("command", choices=["prepare", "where"], help="prepare: convert if needed; where: print paths")
    parser.add_argument("--rebuild", action="store_true", help="convert again even if the cache looks fine")
    args = parser.parse_args(argv)
    try:
        if args.command == "where":
            print(f"cache:  {cache_dir()}")
            print(f"source: {find_gguf_source()[0]}")
            return 0
        print(f"offline target ready: {ensure_target_dir(rebuild=args.rebuild)}")
    except AssetMissingError as err:
        print(f"error: {err}")
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
