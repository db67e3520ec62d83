"""The syntax of CNTK's config files (the legacy ``ConfigParameters`` subset reader sections use).

A config is a tree of sections. Each section is parsed when it is first read (CNTK's parser was lazy too), so
blocks no reader looks into — a ``BrainScriptNetworkBuilder`` full of BrainScript expressions — only need
balanced braces. Rules (``spec/brainscript-reader-config.md`` §1): ``#`` comments at a line start or after a
blank; records separated by newlines, ``,`` and ``;``; ``key = value``, a bare ``key`` meaning ``true``;
case-insensitive keys; ``"..."`` quoting; ``[ ]`` and ``{ }`` sections; ``( a : b )`` arrays; a custom
separator right after an opening brace; ``$name$`` variables resolved in the reading section, then its parents.
A key given twice keeps the last value; two sections under one key merge (later keys win), which is how
command-line overrides such as ``Train=[reader=[randomize=false]]`` applied.

Example::

    config = parse_config("root = /d\\nTrain = [ reader = [ file = $root$/x.ctf ; randomize ] ]")
    reader = config.path("Train.reader")
    reader["file"].text                   # '/d/x.ctf'
    reader["randomize"].as_bool()         # True
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from cntkio._src.common.errors import ConfigError

OPENERS = {"[": "]", "{": "}", "(": ")"}
CLOSERS = {close: open_ for open_, close in OPENERS.items()}
RECORD_SEPARATORS = "\n,;"
CUSTOM_SEPARATORS = "`~!@$%^&*_-+|:;,?."
_KEY = re.compile(r"[^\s=\[\]{}()\"$#]+")
_NAME_AND_DOLLAR = re.compile(r"([A-Za-z_][A-Za-z0-9_.]*)\$")
_TRUE = {"true", "t", "1"}
_FALSE = {"false", "f", "0", ""}


class ConfigText:
    """One piece of config text (a file, a string, an override) with its comments blanked out."""

    def __init__(self, content: str, name: str):
        self.name = name
        self.raw = content
        self.clean = _blank_comments(content)
        self._line_starts = [0] + [m.end() for m in re.finditer("\n", content)]

    def line(self, offset: int) -> int:
        """1-based line of ``offset``."""
        return bisect.bisect_right(self._line_starts, offset)

    def where(self, offset: int) -> str:
        return f"{self.name}:{self.line(offset)}"


def _blank_comments(text: str) -> str:
    """``text`` with every comment replaced by spaces (offsets unchanged): ``#`` at a line's first non-blank
    character or after a space or tab, outside double quotes, up to the end of the line."""
    out = list(text)
    in_quote = False
    line_start = True  # only blanks since the start of the line
    i = 0
    while i < len(out):
        c = out[i]
        if c == "\n":
            in_quote, line_start = False, True
        elif c == '"':
            in_quote = not in_quote
            line_start = False
        elif c == "#" and not in_quote and (line_start or out[i - 1] in " \t"):
            end = text.find("\n", i)
            end = len(out) if end < 0 else end
            out[i:end] = " " * (end - i)
            i = end
            continue
        elif c not in " \t\r":
            line_start = False
        i += 1
    return "".join(out)


@dataclass(frozen=True)
class Span:
    """``text.clean[start:end]``: where a value or a section body sits."""

    text: ConfigText
    start: int
    end: int

    @property
    def content(self) -> str:
        return self.text.clean[self.start : self.end]

    def where(self) -> str:
        return self.text.where(self.start)

    def trimmed(self) -> Span:
        content = self.content
        left = len(content) - len(content.lstrip())
        right = len(content.rstrip())
        return Span(self.text, self.start + left, self.start + max(left, right))

    def error(self, message: str) -> ConfigError:
        return ConfigError(f"{self.where()}: {message}")


def split_top_level(span: Span, separators: str, *, tolerate_stray_closers: bool = False) -> list[Span]:
    """The pieces of ``span`` between separators outside quotes and braces (braces must match)."""
    text, clean = span.text, span.text.clean
    pieces: list[Span] = []
    stack: list[int] = []
    in_quote = False
    piece_start = span.start
    for i in range(span.start, span.end):
        c = clean[i]
        if in_quote:
            in_quote = c != '"'
        elif c == '"':
            in_quote = True
        elif c in OPENERS:
            stack.append(i)
        elif c in CLOSERS:
            if not stack:
                if tolerate_stray_closers:  # CNTK ran configs with a stray closing brace at the top level
                    pieces.append(Span(text, piece_start, i))
                    piece_start = i + 1
                    continue
                raise ConfigError(f"{text.where(i)}: '{c}' without a matching opening brace")
            opener = stack.pop()
            if OPENERS[clean[opener]] != c:
                raise ConfigError(
                    f"{text.where(i)}: '{c}' closes '{clean[opener]}' opened at line {text.line(opener)}; "
                    f"expected '{OPENERS[clean[opener]]}'"
                )
        elif not stack and c in separators:
            pieces.append(Span(text, piece_start, i))
            piece_start = i + 1
    if in_quote:
        raise span.error("a double quote is not closed")
    if stack:
        raise ConfigError(f"{text.where(stack[-1])}: '{clean[stack[-1]]}' is never closed")
    pieces.append(Span(text, piece_start, span.end))
    return [piece.trimmed() for piece in pieces if piece.content.strip()]


def _unquoted(content: str) -> Iterator[tuple[int, str, int]]:
    """``(index, character, brace depth before it)`` for every character of ``content`` outside double quotes."""
    depth, in_quote = 0, False
    for i, c in enumerate(content):
        if in_quote:
            in_quote = c != '"'
            continue
        if c == '"':
            in_quote = True
            continue
        yield i, c, depth
        if c in OPENERS:
            depth += 1
        elif c in CLOSERS:
            depth -= 1


def _matching_close(span: Span) -> int:
    """Offset of the brace closing the one that starts ``span`` (-1 if ``span`` does not start with one)."""
    content = span.content
    if not content or content[0] not in OPENERS:
        return -1
    for i, c, depth in _unquoted(content):
        if c in CLOSERS and depth == 1:
            return span.start + i
    return -1


def _is_enclosed(span: Span, opener: str) -> bool:
    """Whether ``span`` is one brace block opened by one of ``opener``'s characters."""
    return span.start < span.end and span.text.clean[span.start] in opener and _matching_close(span) == span.end - 1


def _body(span: Span) -> tuple[Span, str | None]:
    """The inside of a brace block and its custom separator (a special character right after the opening brace,
    except the starts of paths ``..``, ``./``, ``.\\``, ``\\\\`` and of a ``$variable$``)."""
    inner = Span(span.text, span.start + 1, span.end - 1)
    content = inner.content
    if content and content[0] in CUSTOM_SEPARATORS:
        path_start = content.startswith(("..", "./", ".\\", "\\\\"))
        variable = content[0] == "$" and _NAME_AND_DOLLAR.match(content, 1) is not None
        if not path_start and not variable:
            return Span(span.text, inner.start + 1, inner.end), content[0]
    return inner, None


class Value:
    """One value as written: a scalar, a ``[ ]``/``{ }`` section or a ``( : )`` array. ``scope`` is the section
    it was written in (variables are looked up from there)."""

    def __init__(self, key: str, span: Span, scope: Section):
        self.key = key
        self.span = span
        self.scope = scope

    @property
    def where(self) -> str:
        """``file:line`` of the value."""
        return self.span.where()

    def error(self, message: str) -> ConfigError:
        return ConfigError(f"{self.where}: {self.key}: {message}")

    @property
    def is_section(self) -> bool:
        target = self._reference()
        return _is_enclosed((self if target is None else target).span, "[{")

    @property
    def is_array(self) -> bool:
        return _is_enclosed(self.span, "(")

    def _reference(self) -> Value | None:
        """The block a whole-value ``$name$`` refers to, following references (so a section can be given by
        name); None if this is not such a reference, or the chain does not end at a block."""
        value, seen = self, set()
        while True:
            match = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_.]*)\$", value.span.content)
            if match is None or match.group(1).lower() in seen:
                return value if value is not self and _is_enclosed(value.span, "[{(") else None
            seen.add(match.group(1).lower())
            target = value.scope.find(match.group(1))
            if target is None:
                return None
            value = target

    def as_section(self) -> Section:
        if _is_enclosed(self.span, "[{"):
            return Section(self.scope.child_name(self.key), [self], parent=self.scope)
        reference = self._reference()
        if reference is not None and _is_enclosed(reference.span, "[{"):
            return reference.as_section()
        raise self.error(f"expected a [ ... ] or {{ ... }} block, got {self.span.content[:40]!r}")

    @property
    def text(self) -> str:
        """The value as a string: variables substituted, enclosing double quotes removed."""
        if _is_enclosed(self.span, "[{("):
            raise self.error("expected a value, got a block")
        return self.scope.substitute(_unquote(self.span.content), self)

    def as_bool(self) -> bool:
        text = self.text
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise self.error(f"expected a boolean (true/false), got {text!r}")

    def as_int(self) -> int:
        text = self.text.strip()
        if not re.fullmatch(r"[+-]?\d+", text):
            raise self.error(f"expected an integer, got {text!r}")
        return int(text)

    def as_float(self) -> float:
        text = self.text.strip()
        try:
            return float(text)
        except ValueError:
            raise self.error(f"expected a number, got {text!r}") from None

    def elements(self) -> list[Value]:
        """The elements of an array ``( a : b )``; a section alone is a one-element list, and a scalar is split
        on ``:`` (``0.4:0.6``)."""
        if _is_enclosed(self.span, "("):
            inner, separator = _body(self.span)
            return [Value(self.key, piece, self.scope) for piece in split_top_level(inner, separator or ":")]
        if self.is_section:
            return [self]
        reference = self._reference()
        if reference is not None:
            return reference.elements()
        return [Value(self.key, piece, self.scope) for piece in split_top_level(self.span, ":")]

    def as_numbers(self) -> list[float]:
        """A numeric list; ``x*n`` repeats ``x`` n times (``1*3:2`` is 1, 1, 1, 2)."""
        numbers: list[float] = []
        for element in self.elements():
            text = element.text.strip()
            value, _, repeat = text.partition("*")
            try:
                number = float(value)
                times = int(float(repeat)) if repeat else 1
            except ValueError:
                raise element.error(f"expected a number or NUMBER*COUNT, got {text!r}") from None
            numbers += [number] * times
        return numbers

    def as_ints(self) -> list[int]:
        numbers = self.as_numbers()
        if any(n != int(n) for n in numbers):
            raise self.error(f"expected whole numbers, got {self.text!r}")
        return [int(n) for n in numbers]


def _unquote(text: str) -> str:
    text = text.strip()
    return text[1:-1] if len(text) >= 2 and text[0] == '"' and text[-1] == '"' else text


class Section:
    """A ``[ ... ]`` block (or the whole file): keys are case-insensitive, parsed on first use.

    ``sources`` are the values whose blocks make up the section, in order: later ones override and merge
    into earlier ones. Keys read by a builder are remembered (:meth:`unread`).
    """

    def __init__(self, name: str, sources: list[Value], parent: Section | None = None):
        self.name = name
        self.sources = sources
        self.parent = parent
        self._entries: dict[str, list[Value]] | None = None

    def child_name(self, key: str) -> str:
        return f"{self.name}.{key}" if self.name else key

    @property
    def where(self) -> str:
        return self.sources[-1].where if self.sources else "<config>"

    def _parse(self) -> dict[str, list[Value]]:
        if self._entries is None:
            entries: dict[str, list[Value]] = {}
            for source in self.sources:
                top_level = not self.name  # the file and the overrides: no braces around them
                body, separator = (source.span, None) if top_level else _body(source.span)
                for record in split_top_level(body, separator or RECORD_SEPARATORS, tolerate_stray_closers=top_level):
                    value = _record(record, self)
                    layers = entries.setdefault(value.key.lower(), [])
                    if not (_is_enclosed(value.span, "[{") and layers and _is_enclosed(layers[-1].span, "[{")):
                        layers.clear()  # a scalar (or a section over a scalar) replaces; sections merge
                    layers.append(value)
            self._entries = entries
        return self._entries

    def keys(self) -> list[str]:
        """The keys, spelled as last written."""
        return [layers[-1].key for layers in self._parse().values()]

    def __contains__(self, key: str) -> bool:
        return key.lower() in self._parse()

    def get(self, key: str) -> Value | None:
        layers = self._parse().get(key.lower())
        return None if not layers else layers[-1]

    def __getitem__(self, key: str) -> Value:
        value = self.get(key)
        if value is None:
            raise ConfigError(f"{self.where}: section '{self.name}' has no key '{key}'")
        return value

    def find(self, key: str) -> Value | None:
        """``key`` in this section or, failing that, the nearest parent (CNTK's parameter lookup)."""
        section: Section | None = self
        while section is not None:
            value = section.get(key)
            if value is not None:
                return value
            section = section.parent
        return None

    def section(self, key: str) -> Section:
        """The sub-section ``key`` (merged over every place it was given)."""
        layers = self._parse().get(key.lower())
        if not layers:
            raise ConfigError(f"{self.where}: section '{self.name or '<top level>'}' has no section '{key}'")
        if len(layers) == 1 or not all(layer.is_section for layer in layers):
            return layers[-1].as_section()
        sources = [source for layer in layers for source in layer.as_section().sources]
        return Section(self.child_name(layers[-1].key), sources, self)

    def path(self, dotted: str) -> Section:
        """The section at a dotted path (``"Train.reader"``)."""
        section = self
        for part in dotted.split("."):
            section = section.section(part)
        return section

    def variable(self, name: str, user: Value) -> Value:
        """The value ``$name$`` refers to, seen from this section."""
        value = self.find(name)
        if value is None:
            raise user.error(
                f"unknown variable ${name}$; define {name} in the config or pass it in variables={{'{name}': ...}}"
            )
        return value

    def substitute(self, text: str, user: Value, resolving: tuple[str, ...] = ()) -> str:
        """``text`` with every ``$name$`` replaced; ``$$`` and unknown names are errors."""
        if "$" not in text:
            return text
        out: list[str] = []
        i = 0
        while i < len(text):
            c = text[i]
            if c != "$":
                out.append(c)
                i += 1
                continue
            match = _NAME_AND_DOLLAR.match(text, i + 1)
            if match is None:
                if text.startswith("$$", i):
                    raise user.error(f"'$$' in {text!r} (a variable is written $name$)")
                out.append(c)
                i += 1
                continue
            name = match.group(1)
            if name.lower() in resolving:
                raise user.error(f"variable ${name}$ refers to itself ({' -> '.join((*resolving, name))})")
            target = self.variable(name, user)
            if _is_enclosed(target.span, "[{("):
                raise user.error(f"variable ${name}$ is a block ({target.where}); it cannot be part of a value")
            replacement = _unquote(target.span.content)
            if "\n" in replacement:
                raise user.error(f"variable ${name}$ spans several lines and cannot be substituted")
            out.append(target.scope.substitute(replacement, target, (*resolving, name.lower())))
            i = match.end()
        return "".join(out)

    def values(self) -> Iterator[Value]:
        for layers in self._parse().values():
            yield layers[-1]


def _record(span: Span, scope: Section) -> Value:
    """``key = value``, ``key [ ... ]`` or a bare ``key`` (``true``)."""
    content = span.content
    cut = _top_level_index(content, "=")
    if cut >= 0:
        key, value_start = content[:cut].strip(), span.start + cut + 1
    else:
        brace = _top_level_index(content, "[{(")
        if brace < 0:
            key, value_start = content.strip(), -1
        else:
            key, value_start = content[:brace].strip(), span.start + brace
    if not _KEY.fullmatch(key):
        raise span.error(f"expected 'key = value', got {content.strip()[:60]!r}")
    if value_start < 0:
        return Value(key, Span(ConfigText("true", span.text.name), 0, 4), scope)
    value = Span(span.text, value_start, span.end).trimmed()
    if not value.content:
        raise span.error(f"'{key}' has an empty value (write {key}=[] for an empty section)")
    return Value(key, value, scope)


def _top_level_index(content: str, characters: str) -> int:
    """Index of the first of ``characters`` outside quotes and braces, -1 if there is none."""
    return next((i for i, c, depth in _unquoted(content) if c in characters and depth == 0), -1)


def parse_config(
    text: str,
    name: str = "<config>",
    *,
    overrides: Mapping[str, object] | list[str] | None = None,
    predefined: Mapping[str, str] | None = None,
) -> Section:
    """The top-level section of a config text. ``overrides`` replace or merge into top-level definitions, as
    CNTK's command line did: a mapping (``{"DataDir": "/data", "Train.reader.randomize": False}``) or
    command-line strings (``["DataDir=/data", "Train=[reader=[randomize=false]]"]``). ``predefined`` variables
    (``ConfigDir`` …) are found when neither the config nor the overrides define them."""
    root: Section | None = None
    if predefined:
        lines = "\n".join(f"{key}={_quoted(str(value))}" for key, value in predefined.items())
        root = Section("", [_whole(ConfigText(lines, "<predefined variables>"), None)])
    top = Section("", [], parent=root)
    top.sources.append(_whole(ConfigText(text, name), top))
    for index, override in enumerate(_override_texts(overrides)):
        top.sources.append(_whole(ConfigText(override, f"<override {index + 1}>"), top))
    return top


def _whole(text: ConfigText, scope: Section | None) -> Value:
    return Value("", Span(text, 0, len(text.clean)), scope)  # type: ignore[arg-type]


def _quoted(value: str) -> str:
    return f'"{value}"' if re.search(r"[\s,;#\[\]{}():]", value) or not value else value


def _override_texts(overrides: Mapping[str, object] | list[str] | None) -> list[str]:
    if overrides is None:
        return []
    if isinstance(overrides, Mapping):
        texts = []
        for dotted, value in overrides.items():
            text = ("true" if value else "false") if isinstance(value, bool) else _quoted(str(value))
            *sections, key = dotted.split(".")
            assignment = f"{key}={text}"
            for section in reversed(sections):
                assignment = f"{section}=[{assignment}]"
            texts.append(assignment)
        return texts
    return [str(o) for o in overrides]
