"""The one exception type every converter raises on bad input."""

from __future__ import annotations


class ConversionError(ValueError):
    """Input that cannot be converted, located by line number and JSON Pointer.

    ``line`` is set when the input came from a line-oriented file; ``path`` is
    an RFC 6901 JSON Pointer into the message ("" for the message itself).
    """

    def __init__(self, reason: str, *, path: str = "", line: int | None = None) -> None:
        self.reason = reason
        self.path = path
        self.line = line
        super().__init__(self._text())

    def _text(self) -> str:
        where = []
        if self.line is not None:
            where.append(f"line {self.line}")
        if self.path:
            where.append(self.path)
        return f"{': '.join(where)}: {self.reason}" if where else self.reason

    def at_line(self, line: int | None) -> ConversionError:
        """The same error, located at ``line``."""
        return ConversionError(self.reason, path=self.path, line=line)

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (self.reason, self.path, self.line))


def _rebuild(reason: str, path: str, line: int | None) -> ConversionError:
    return ConversionError(reason, path=path, line=line)
