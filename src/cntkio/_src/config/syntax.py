"""The syntax of CNTK's config files (the legacy ``ConfigParameters`` subset reader sections use).

A config is a tree of sections. Each section is parsed when it is first read (CNTK's parser was lazy too), so
blocks no reader looks into — a ``BrainScriptNetworkBuilder`` full of BrainScript expressions — only need
balanced braces. Rules (``spec/brainscript-reader-config.md`` §1): ``#`` comments at a line start or after a
blank; records separated by newlines, ``,`` and ``;``; ``key = value``, a bare ``key`` meaning ``true``;
case-insensitive keys; ``"..."`` quoting; ``[ ]`` and ``{ }`` sections; ``( a : b )`` arrays; a custom
separator right after an opening brace; ``$name$`` variables resolved in the reading section, then its parents.
A key given twice keeps the last value; two sections under one key merge (later keys win), which is how
command-line overrides such as ``Train=[reader=[randomize=false]]`` applied.

Hostile or odd text gets a :class:`ConfigError` naming the file and line, in time linear in the text: blocks nest at
most :data:`MAX_NESTING` deep, a value's variables expand to at most :data:`MAX_EXPANDED_CHARS` characters (each
value is expanded once, chains of any length without recursion; a cycle is named), a numeric list holds at most
:data:`MAX_REPEATED_NUMBERS` numbers (``NUMBER*COUNT``: COUNT a whole number >= 1), integers fit in 64 bits.

Example::

    config = parse_config("root = /d\\nTrain = [ reader = [ file = $root$/x.ctf ; randomize ] ]")
    reader = config.path("Train.reader")
    reader["file"].text                   # '/d/x.ctf'
    reader["randomize"].as_bool()         # True
"""

from __future__ import annotations

import bisect
import functools
import math
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
_REFERENCE = re.compile(r"\$([A-Za-z_][A-Za-z0-9_.]*)\$")
_INTEGER = re.compile(r"[+-]?\d+")
_TRUE = {"true", "t", "1"}
_FALSE = {"false", "f", "0", ""}

#: Blocks (``[ ]``, ``{ }``, ``( )``) nested deeper than this are an error naming the line of the one too deep.
MAX_NESTING = 1000
#: A value whose ``$variables$`` expand to more characters than this (or than it has itself, if more) is an error:
#: a chain of variables that each repeat the one before (``v2 = $v1$$v1$``) doubles at every step.
MAX_EXPANDED_CHARS = 1 << 20
#: A numeric list (``NUMBER*COUNT`` repeats included) longer than this is an error.
MAX_REPEATED_NUMBERS = 1 << 20
_INT64 = 1 << 63
_SHOWN_CHARS = 60  # of a value quoted in a message


class ConfigText:
    """One piece of config text (a file, a string, an override) with its comments blanked out.

    Where every brace block closes is found once, in one pass over the text, the first time it is needed
    (:meth:`closing`); each section then scans only the characters at its own top level, jumping over the blocks
    inside, so parsing is linear in the text however deep the nesting."""

    def __init__(self, content: str, name: str):
        self.name = name
        self.raw = content
        self.clean = _blank_comments(content)
        self._line_starts = [0] + [m.end() for m in re.finditer("\n", content)]
        self._closing: dict[int, int] | None = None

    def line(self, offset: int) -> int:
        """1-based line of ``offset``."""
        return bisect.bisect_right(self._line_starts, offset)

    def where(self, offset: int) -> str:
        return f"{self.name}:{self.line(offset)}"

    def closing(self) -> dict[int, int]:
        """Offset of every opening brace -> offset of the brace closing it (outside double quotes). Raises the first
        structural error of the whole text, as reading its top level always did: a brace closed by the wrong kind, a
        brace or a double quote never closed, blocks nested more than :data:`MAX_NESTING` deep. A closing brace
        with no opening one at the top level is left out (CNTK ran configs with one; :func:`split_top_level`)."""
        if self._closing is not None:
            return self._closing
        clean = self.clean
        closing: dict[int, int] = {}
        stack: list[int] = []
        search = _scanner("").search
        position = 0
        while (found := search(clean, position)) is not None:
            i = found.start()
            c = clean[i]
            position = i + 1
            if c == '"':
                end = clean.find('"', position)
                if end < 0:
                    raise ConfigError(f"{self.where(i)}: a double quote is not closed")
                position = end + 1
            elif c in OPENERS:
                stack.append(i)
                if len(stack) > MAX_NESTING:
                    raise ConfigError(
                        f"{self.where(i)}: blocks are nested more than {MAX_NESTING} deep (the outermost open one "
                        f"starts at line {self.line(stack[0])})"
                    )
            elif stack:
                opener = stack.pop()
                if OPENERS[clean[opener]] != c:
                    raise ConfigError(
                        f"{self.where(i)}: '{c}' closes '{clean[opener]}' opened at line {self.line(opener)}; "
                        f"expected '{OPENERS[clean[opener]]}'"
                    )
                closing[opener] = i
        if stack:
            raise ConfigError(f"{self.where(stack[-1])}: '{clean[stack[-1]]}' is never closed")
        self._closing = closing
        return closing


@functools.cache
def _scanner(characters: str) -> re.Pattern[str]:
    """Finds the next double quote, brace or one of ``characters``."""
    return re.compile("[" + re.escape('"[]{}()' + characters) + "]")


_COMMENT_MARKS = re.compile(r'["\n#]')
_NOT_BLANK = re.compile(r"[^ \t\r]")
_NOT_SPACE = re.compile(r"\S")


def _blank_comments(text: str) -> str:
    """``text`` with every comment replaced by spaces (offsets unchanged): ``#`` at a line's first non-blank
    character or after a space or tab, outside double quotes, up to the end of the line."""
    pieces: list[str] = []
    kept = 0  # text[kept:] is not copied yet
    in_quote = False
    line_begin = 0
    first_solid = -1  # offset of the current line's first non-blank character (-1: not looked for yet)
    position = 0
    while (found := _COMMENT_MARKS.search(text, position)) is not None:
        i = found.start()
        c = text[i]
        position = i + 1
        if c == "\n":
            in_quote, line_begin, first_solid = False, i + 1, -1
        elif c == '"':
            in_quote = not in_quote
        elif not in_quote:
            if first_solid < 0:
                solid = _NOT_BLANK.search(text, line_begin)
                first_solid = len(text) if solid is None else solid.start()
            if i == first_solid or text[i - 1] in " \t":
                end = text.find("\n", i)
                end = len(text) if end < 0 else end
                pieces += (text[kept:i], " " * (end - i))
                kept = position = end
    pieces.append(text[kept:])
    return "".join(pieces)


def _shown(text: str) -> str:
    """``text`` quoted for a message, cut when long."""
    if len(text) <= _SHOWN_CHARS:
        return repr(text)
    return f"{text[:_SHOWN_CHARS]!r}... ({len(text):,} characters)"


def _chain(keys: list[str], what: str) -> str:
    """``a -> b -> c`` for a message, with the middle left out when long."""
    if len(keys) <= 7:
        return " -> ".join(keys)
    return " -> ".join([*keys[:3], "...", *keys[-3:]]) + f"; {what}"


@dataclass(frozen=True)
class Span:
    """``text.clean[start:end]``: where a value or a section body sits."""

    text: ConfigText
    start: int
    end: int

    @property
    def content(self) -> str:
        return self.text.clean[self.start : self.end]

    def head(self, length: int = _SHOWN_CHARS) -> str:
        """The first ``length`` characters (for messages; no copy of a long block)."""
        return self.text.clean[self.start : min(self.end, self.start + length)]

    def where(self) -> str:
        return self.text.where(self.start)

    def trimmed(self) -> Span:
        clean = self.text.clean
        solid = _NOT_SPACE.search(clean, self.start, self.end)
        if solid is None:
            return Span(self.text, self.end, self.end)
        end = self.end
        while clean[end - 1].isspace():
            end -= 1
        return Span(self.text, solid.start(), end)

    @property
    def empty(self) -> bool:
        return self.start >= self.end

    def error(self, message: str) -> ConfigError:
        return ConfigError(f"{self.where()}: {message}")


def split_top_level(span: Span, separators: str, *, tolerate_stray_closers: bool = False) -> list[Span]:
    """The pieces of ``span`` between separators outside quotes and braces (braces must match). Blocks are jumped
    over (:meth:`ConfigText.closing`): only the characters at ``span``'s own top level are looked at."""
    text, clean = span.text, span.text.clean
    closing = text.closing()
    search = _scanner(separators).search
    pieces: list[Span] = []
    piece_start = position = span.start
    while (found := search(clean, position, span.end)) is not None:
        i = found.start()
        c = clean[i]
        if c == '"':
            end = clean.find('"', i + 1, span.end)
            if end < 0:
                raise ConfigError(f"{text.where(i)}: a double quote is not closed")
            position = end + 1
        elif c in OPENERS:
            position = closing[i] + 1
        elif c in CLOSERS and not tolerate_stray_closers:
            raise ConfigError(f"{text.where(i)}: '{c}' without a matching opening brace")
        else:  # a separator, or a stray closing brace at the top level (CNTK ran configs with one)
            pieces.append(Span(text, piece_start, i))
            piece_start = position = i + 1
    pieces.append(Span(text, piece_start, span.end))
    return [piece for piece in (piece.trimmed() for piece in pieces) if not piece.empty]


def _top_level_index(span: Span, characters: str) -> int:
    """Offset of the first of ``characters`` outside quotes and braces in ``span`` (an opening brace among
    ``characters`` is found itself), -1 if there is none."""
    clean = span.text.clean
    closing = span.text.closing()
    search = _scanner(characters).search
    position = span.start
    while (found := search(clean, position, span.end)) is not None:
        i = found.start()
        c = clean[i]
        if c in characters:
            return i
        if c == '"':
            end = clean.find('"', i + 1, span.end)
            if end < 0:
                return -1
            position = end + 1
        elif c in OPENERS:
            position = closing[i] + 1
        else:
            position = i + 1
    return -1


def _is_enclosed(span: Span, opener: str) -> bool:
    """Whether ``span`` is one brace block opened by one of ``opener``'s characters."""
    return (
        span.start < span.end
        and span.text.clean[span.start] in opener
        and span.text.closing().get(span.start) == span.end - 1
    )


def _body(span: Span) -> tuple[Span, str | None]:
    """The inside of a brace block and its custom separator (a special character right after the opening brace,
    except the starts of paths ``..``, ``./``, ``.\\``, ``\\\\`` and of a ``$variable$``)."""
    clean = span.text.clean
    start, end = span.start + 1, span.end - 1
    if start < end and clean[start] in CUSTOM_SEPARATORS:
        path_start = clean.startswith(("..", "./", ".\\", "\\\\"), start, end)
        variable = clean[start] == "$" and _NAME_AND_DOLLAR.match(clean, start + 1, end) is not None
        if not path_start and not variable:
            return Span(span.text, start + 1, end), clean[start]
    return Span(span.text, start, end), None


class Value:
    """One value as written: a scalar, a ``[ ]``/``{ }`` section or a ``( : )`` array. ``scope`` is the section
    it was written in (variables are looked up from there)."""

    def __init__(self, key: str, span: Span, scope: Section):
        self.key = key
        self.span = span
        self.scope = scope
        self._expanded: str | None = None  # the text with its variables substituted, once it was asked for
        self._multiline: bool | None = None

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
        name); None if this is not such a reference, or the chain does not end at a block (or goes round)."""
        value, seen = self, {id(self)}
        while True:
            span = value.span
            match = _REFERENCE.fullmatch(span.text.clean, span.start, span.end)
            if match is None:
                return value if value is not self and _is_enclosed(span, "[{(") else None
            target = value.scope.find(match.group(1))
            if target is None or id(target) in seen:
                return None
            seen.add(id(target))
            value = target

    def as_section(self) -> Section:
        if _is_enclosed(self.span, "[{"):
            return Section(self.scope.child_name(self.key), [self], parent=self.scope)
        reference = self._reference()
        if reference is not None and _is_enclosed(reference.span, "[{"):
            return reference.as_section()
        raise self.error(f"expected a [ ... ] or {{ ... }} block, got {self.span.head(40)!r}")

    @property
    def text(self) -> str:
        """The value as a string: variables substituted, enclosing double quotes removed."""
        if _is_enclosed(self.span, "[{("):
            raise self.error("expected a value, got a block")
        return _expand(self)

    def _written(self) -> str:
        """The value as written, enclosing double quotes removed (variables not substituted)."""
        return _unquote(self.span.content)

    def _spans_lines(self) -> bool:
        if self._multiline is None:
            span = self.span
            self._multiline = span.text.clean.find("\n", span.start, span.end) >= 0
        return self._multiline

    def as_bool(self) -> bool:
        text = self.text
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise self.error(f"expected a boolean (true/false), got {_shown(text)}")

    def as_int(self) -> int:
        """A decimal integer that fits in 64 bits (signed)."""
        text = self.text.strip()
        if not _INTEGER.fullmatch(text):
            raise self.error(f"expected an integer, got {_shown(text)}")
        number = int(text) if len(text) <= 20 else _INT64
        if not -_INT64 <= number < _INT64:
            raise self.error(f"expected a 64-bit integer, got {_shown(text)}")
        return number

    def as_float(self) -> float:
        text = self.text.strip()
        try:
            return float(text)
        except ValueError:
            raise self.error(f"expected a number, got {_shown(text)}") from None

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
        """A non-empty numeric list; ``x*n`` repeats ``x`` n times (``1*3:2`` is 1, 1, 1, 2): n a whole number
        >= 1, and at most :data:`MAX_REPEATED_NUMBERS` numbers in all."""
        numbers: list[float] = []
        for element in self.elements():
            text = element.text.strip()
            value, _, repeat = text.partition("*")
            try:
                number = float(value)
                count = float(repeat) if repeat else 1.0
            except ValueError:
                raise element.error(f"expected a number or NUMBER*COUNT, got {_shown(text)}") from None
            if not (math.isfinite(count) and count.is_integer() and count >= 1):
                raise element.error(f"in NUMBER*COUNT, COUNT must be a whole number >= 1, got {_shown(repeat)}")
            if len(numbers) + count > MAX_REPEATED_NUMBERS:
                raise element.error(
                    f"{_shown(text)} repeats {int(count)} times; at most {MAX_REPEATED_NUMBERS:,} numbers in a list"
                )
            numbers += [number] * int(count)
        if not numbers:
            raise self.error(f"expected at least one number, got {self.span.head(40)!r}")
        return numbers

    def as_ints(self) -> list[int]:
        """:meth:`as_numbers`, each a whole number that fits in 64 bits (signed)."""
        numbers = self.as_numbers()
        if not all(math.isfinite(n) and n.is_integer() and -_INT64 <= n < _INT64 for n in numbers):
            raise self.error(f"expected whole numbers, got {_shown(self.text)}")
        return [int(n) for n in numbers]


def _unquote(text: str) -> str:
    text = text.strip()
    return text[1:-1] if len(text) >= 2 and text[0] == '"' and text[-1] == '"' else text


@dataclass
class _Expansion:
    """A value whose variables are being substituted (:func:`_expand`): what is done so far."""

    value: Value
    text: str  # as written
    limit: int
    position: int = 0  # in ``text``: the rest is still to do
    size: int = 0
    parts: list[str] | None = None

    def add(self, piece: str, trail: list[_Expansion]) -> None:
        self.size += len(piece)
        if self.size > self.limit:
            keys = [step.value.key for step in trail]
            raise self.value.error(
                f"expands to more than {MAX_EXPANDED_CHARS:,} characters ({_chain(keys, f'{len(keys)} levels')}): "
                "variables that repeat a variable multiply its length"
            )
        if self.parts is None:
            self.parts = []
        self.parts.append(piece)


def _expand(root: Value) -> str:
    """``root``'s text with every ``$name$`` replaced, looked up from the section each value was written in;
    ``$$`` and unknown names are errors, as is a variable that refers to itself, one that is a block or spans
    several lines, and a value that grows past :data:`MAX_EXPANDED_CHARS`.

    Without recursion (a chain of any length), and each value is expanded once (kept in ``Value._expanded``):
    linear in the values and references involved, whatever repeats what."""
    if root._expanded is not None:
        return root._expanded
    written = root._written()
    if "$" not in written:
        root._expanded = written
        return written
    stack = [_Expansion(root, written, max(MAX_EXPANDED_CHARS, len(written)))]
    active = {id(root): 0}  # values being expanded -> their place in the stack
    while stack:
        step = stack[-1]
        value, text = step.value, step.text
        pushed = False
        while not pushed:
            dollar = text.find("$", step.position)
            if dollar < 0:
                step.add(text[step.position :], stack)
                break
            step.add(text[step.position : dollar], stack)
            match = _NAME_AND_DOLLAR.match(text, dollar + 1)
            if match is None:
                if text.startswith("$$", dollar):
                    raise value.error(f"'$$' in {_shown(text)} (a variable is written $name$)")
                step.add("$", stack)
                step.position = dollar + 1
                continue
            name = match.group(1)
            target = value.scope.variable(name, value)
            if id(target) in active:
                keys = [s.value.key for s in stack[active[id(target)] :]] + [target.key]
                raise target.error(
                    f"variable ${target.key}$ refers to itself ({_chain(keys, f'{len(keys) - 1} variables')})"
                )
            if _is_enclosed(target.span, "[{("):
                raise value.error(f"variable ${name}$ is a block ({target.where}); it cannot be part of a value")
            if target._spans_lines():
                raise value.error(f"variable ${name}$ spans several lines and cannot be substituted")
            step.position = match.end()
            if target._expanded is not None:
                step.add(target._expanded, stack)
                continue
            written = target._written()
            if "$" not in written:
                target._expanded = written
                step.add(written, stack)
                continue
            active[id(target)] = len(stack)
            stack.append(_Expansion(target, written, max(MAX_EXPANDED_CHARS, len(written))))
            pushed = True
        if pushed:
            continue
        done = stack.pop()
        del active[id(done.value)]
        result = "".join(done.parts or ())
        done.value._expanded = result
        if stack:
            stack[-1].add(result, stack)
    assert root._expanded is not None
    return root._expanded


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
        self._found: dict[str, Value | None] = {}  # find()'s answers (the sections never change once parsed)

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
        lower = key.lower()
        if lower in self._found:
            return self._found[lower]
        section: Section | None = self
        value = None
        while section is not None and value is None:
            value = section.get(key)
            section = section.parent
        self._found[lower] = value
        return value

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

    def values(self) -> Iterator[Value]:
        for layers in self._parse().values():
            yield layers[-1]


def _record(span: Span, scope: Section) -> Value:
    """``key = value``, ``key [ ... ]`` or a bare ``key`` (``true``)."""
    clean = span.text.clean
    cut = _top_level_index(span, "=")
    if cut >= 0:
        key, value_start = clean[span.start : cut].strip(), cut + 1
    else:
        brace = _top_level_index(span, "[{(")
        if brace < 0:
            key, value_start = span.content.strip(), -1
        else:
            key, value_start = clean[span.start : brace].strip(), brace
    if not _KEY.fullmatch(key):
        raise span.error(f"expected 'key = value', got {span.head(200).strip()[:60]!r}")
    if value_start < 0:
        return Value(key, Span(ConfigText("true", span.text.name), 0, 4), scope)
    value = Span(span.text, value_start, span.end).trimmed()
    if value.empty:
        raise span.error(f"'{key}' has an empty value (write {key}=[] for an empty section)")
    return Value(key, value, scope)


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
