"""A griffe extension: config fields documented by their `field(..., help=...)`.

rnnkit declares every config value as `name: type = field(default, help="...",
choices=..., at_least=...)` (see `rnnkit.config.field`). Static analysis sees only the
call, so this extension turns it into what a reader wants in the API reference: the
default as the attribute's value, and the help text, the allowed values and the range
as its docstring. The text is the one `rnnkit run NAME --help` prints.
"""

from __future__ import annotations

import ast
import html

import griffe

BOUNDS = {"at_least": ">=", "above": ">", "at_most": "<=", "below": "<"}


def _field_call(node: ast.AST | None) -> ast.Call | None:
    value = getattr(node, "value", None)
    if not isinstance(value, ast.Call):
        return None
    function = value.func
    name = function.attr if isinstance(function, ast.Attribute) else function
    name = name.id if isinstance(name, ast.Name) else name
    return value if name == "field" else None


class FieldHelp(griffe.Extension):
    """Sets the docstring and value of attributes declared with `field(...)`."""

    def on_attribute_instance(
        self, *, node: ast.AST | griffe.ObjectNode, attr: griffe.Attribute, **kwargs
    ) -> None:
        call = _field_call(node)
        if call is None:
            return
        keywords = {keyword.arg: keyword.value for keyword in call.keywords}
        if "help" not in keywords:
            return
        try:
            # Escaped: a help text may hold `<unk>`, which Markdown takes for HTML.
            lines = [html.escape(ast.literal_eval(keywords["help"]), quote=False)]
        except ValueError:
            return
        if "choices" in keywords:
            lines.append(f"Allowed: `{ast.unparse(keywords['choices'])}`.")
        limits = [
            f"{symbol} {ast.unparse(keywords[name])}"
            for name, symbol in BOUNDS.items()
            if name in keywords
        ]
        if limits:
            lines.append(f"Range: {', '.join(limits)}.")
        attr.docstring = griffe.Docstring(
            "\n\n".join(lines), lineno=attr.lineno, parent=attr
        )
        if call.args:
            attr.value = ast.unparse(call.args[0])
