"""Rewrite a wheel without some top-level packages and under a new compatibility tag.

Used by tools/install.sh for the offline Detectron2 wheel, whose ``tools`` package would
shadow this project's ``tools/`` and whose ``cp310`` tag pip on other Pythons refuses.
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import pathlib
import zipfile


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def repack(wheel: pathlib.Path, drop: list[str], tag: str, out_dir: pathlib.Path) -> pathlib.Path:
    """Copy ``wheel`` to ``out_dir`` without the top-level packages in ``drop``, tagged ``tag``."""
    dist, version = wheel.name.split("-")[:2]
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"{dist}-{version}-{tag}.whl"
    info = f"{dist}-{version}.dist-info"
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        record = []
        for item in src.infolist():
            name = item.filename
            if name.split("/")[0] in drop or name == f"{info}/RECORD":
                continue
            data = src.read(item)
            if name == f"{info}/WHEEL":
                data = b"".join(
                    f"Tag: {tag}\n".encode() if line.startswith(b"Tag:") else line
                    for line in data.splitlines(keepends=True)
                )
            elif name == f"{info}/top_level.txt":
                data = b"".join(line for line in data.splitlines(keepends=True) if line.strip().decode() not in drop)
            dst.writestr(name, data)
            record.append(_record_line(name, data))
        record.append(f"{info}/RECORD,,")
        dst.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("wheel", type=pathlib.Path, help="the wheel to rewrite")
    parser.add_argument("--drop", action="append", default=[], help="top-level package to leave out (repeatable)")
    parser.add_argument("--tag", required=True, help="new compatibility tag, e.g. py3-none-any")
    parser.add_argument("--out-dir", type=pathlib.Path, required=True, help="where to write the new wheel")
    args = parser.parse_args()
    print(f"[install] repacked {repack(args.wheel, args.drop, args.tag, args.out_dir)}")


if __name__ == "__main__":
    main()
