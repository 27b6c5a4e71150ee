"""A pair file's layout through python-frontmatter: the ``---`` delimiters, the YAML
between them and the body after.

:class:`PairYAML` loads with :func:`wrenmem.pairs.pairfile.load_yaml`'s loader (libyaml's
where PyYAML has it, aliases bounded) and exports the front matter as the lines
:func:`wrenmem.pairs.pairfile.render_pair` made (key order, quoting, kept comments)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import frontmatter
from frontmatter.default_handlers import YAMLHandler


class PairYAML(YAMLHandler):
    """python-frontmatter's YAML handler for pair files (see the module docstring)."""

    FM_BOUNDARY = re.compile(r"^---[ \t]*$", re.MULTILINE)

    def __init__(self, load: Callable[[str], Any]) -> None:
        super().__init__()
        self._load = load

    def load(self, fm: str, **kwargs: object) -> Any:
        return self._load(fm) if fm.strip() else None

    def export(self, metadata: dict[str, object], **kwargs: object) -> str:
        lines = kwargs.get("lines")
        if isinstance(lines, Sequence):
            return "\n".join(str(line) for line in lines)
        return super().export(metadata, **kwargs)


def dumps(handler: PairYAML, front: Sequence[str], body: str) -> str:
    """The text of a pair file: ``front`` (the YAML lines) between ``---`` delimiters,
    then ``body`` after an empty line; one newline at the end."""
    return frontmatter.dumps(frontmatter.Post(body), handler=handler, lines=front) + "\n"


# A key at the start of a line (a top-level key of the front matter), quoted or not.
_TOP_KEY = re.compile(r"^(['\"]?)([^\s'\"#:\-\[{][^'\":]*?)\1[ \t]*:(?=[ \t]|$)", re.M)


def repeated_key(text: str) -> tuple[str, int, int] | None:
    """A top-level key the YAML mapping ``text`` gives twice, which PyYAML takes silently
    (the last wins): the key and the 1-based lines of its first two, else None. A line scan
    finds candidates; only then is the text composed, to be sure."""
    keys = [m.group(2) for m in _TOP_KEY.finditer(text)]
    if len(keys) == len(set(keys)):
        return None
    import yaml

    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)  # nodes only: no alias expands
    except yaml.YAMLError:
        return None
    if not isinstance(node, yaml.MappingNode):
        return None
    lines: dict[str, int] = {}
    for key, _value_node in node.value:
        if not isinstance(key, yaml.ScalarNode) or key.value == "<<":
            continue
        line = key.start_mark.line + 1
        if key.value in lines:
            return key.value, lines[key.value], line
        lines[key.value] = line
    return None
