"""JSON feed exporters that write dataclass items without ItemAdapter's per-value probing, byte for byte what
Scrapy's own exporters write (docs/records.md, "Export")."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from scrapy.exporters import JsonItemExporter, JsonLinesItemExporter
from scrapy.utils.python import to_bytes
from scrapy.utils.serialize import ScrapyJSONEncoder

@functools.cache
def _field_names(cls: type) -> tuple[str, ...] | None:
    """The field names of dataclass *cls* in declaration order (``ItemAdapter``'s order); ``None``: no dataclass."""
    return tuple(f.name for f in dataclasses.fields(cls)) if dataclasses.is_dataclass(cls) else None


@functools.cache
def _plain_fields(cls: type) -> tuple[str, ...] | None:
    """:func:`_field_names`, or ``None`` when a field asks for a ``serializer`` (Scrapy's path applies it)."""
    names = _field_names(cls)
    if names is None or any("serializer" in f.metadata for f in dataclasses.fields(cls)):
        return None
    return names


class DataclassJSONEncoder(ScrapyJSONEncoder):
    """Scrapy's JSON encoder, with nested dataclasses as shallow dicts (the same JSON as ``ItemAdapter.asdict``,
    which applies no serializer to nested items either)."""

    def default(self, o: Any) -> Any:
        names = _field_names(type(o))
        if names is not None:
            return {name: getattr(o, name) for name in names}
        return super().default(o)


class JsonLinesExporter(JsonLinesItemExporter):
    """``jsonlines``/``jsonl``/``jl`` feeds (``FEED_EXPORTERS``): a plain dataclass item is a dict of its fields."""

    def __init__(self, file: Any, **kwargs: Any) -> None:
        super().__init__(file, **kwargs)
        self.encoder = DataclassJSONEncoder(**self._kwargs)

    def export_item(self, item: Any) -> None:
        names = _plain_fields(type(item)) if self.fields_to_export is None else None
        if names is None:
            super().export_item(item)
            return
        fields = {name: getattr(item, name) for name in names}
        self.file.write(to_bytes(self.encoder.encode(fields) + "\n", self.encoding))


class JsonExporter(JsonItemExporter):
    """``json`` feeds (``FEED_EXPORTERS``): nested dataclasses through :class:`DataclassJSONEncoder`."""

    def __init__(self, file: Any, **kwargs: Any) -> None:
        super().__init__(file, **kwargs)
        self.encoder = DataclassJSONEncoder(**self._kwargs)
