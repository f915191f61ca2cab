"""mkdocs hook: links from docs/ to the rest of the checkout (benchmark results, k8s/README.md).

mkdocs validates only links between pages of docs/, and in strict mode fails on any link that leaves
it. This hook checks those links itself: each must name a file or folder that exists in the checkout
(a missing one fails the build, as a broken link between pages does), and is then passed through
unchanged. With `use_directory_urls: false` and the site built into `site/` at the top of the
checkout, a page keeps the depth its source had in docs/, so `../benchmarks/results/latest.md`
still points at the right file from the built page.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.exceptions import PluginError

_HIDDEN = "tsvk-repo-file:"  # a scheme mkdocs treats as an outside link and leaves alone
_LINK = re.compile(r"(\]\()((?:\.\./)+[^)\s#]+)(#[^)\s]*)?(\))")


def on_page_markdown(markdown: str, page, config, files) -> str:
    docs_dir = Path(config["docs_dir"]).resolve()
    root = docs_dir.parent
    source_dir = (docs_dir / page.file.src_uri).parent

    def check(match: re.Match) -> str:
        target = (source_dir / match.group(2)).resolve()
        if target.is_relative_to(docs_dir):
            return match.group(0)  # a page of the site: mkdocs checks it
        if not target.is_relative_to(root) or not target.exists():
            raise PluginError(f"{page.file.src_uri}: the link {match.group(2)} names nothing in the checkout")
        return f"{match.group(1)}{_HIDDEN}{match.group(2)}{match.group(3) or ''}{match.group(4)}"

    return _LINK.sub(check, markdown)


def on_page_content(html: str, page, config, files) -> str:
    return html.replace(f'href="{_HIDDEN}', 'href="').replace(f'src="{_HIDDEN}', 'src="')
