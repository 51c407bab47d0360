"""JSON feed exporters that turn dataclass items into JSON without ItemAdapter's per-value probing; the bytes are
those of Scrapy's own exporters (docs/records.md, "Export").

Scrapy's exporters wrap every item in an ItemAdapter, and its JSON encoder turns each nested item into a dict with
``ItemAdapter.asdict()``, which asks every adapter class about every nested value: about 2 ms per Weibo post with
its media, repost and source. Here a dataclass becomes a shallow dict of its fields (names cached per class) and the
C encoder walks the values, calling back only for the next nested dataclass. Anything else (other item types,
``FEED_EXPORT_FIELDS``, a field ``serializer`` in the dataclass metadata) takes Scrapy's own path.
"""

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
