"""The README's and docs/'s relative links point at files of the repository."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")  # [text](target)


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(document):
    targets = (link.split("#")[0] for link in LINK.findall(document.read_text()))
    missing = [t for t in targets if t and "://" not in t and not (document.parent / t).exists()]
    assert not missing, f"{document.relative_to(ROOT)} links to missing files: {missing}"
