"""Spider arguments: the fields every platform spider takes, the small validators platform models share, and the
check the crawl command runs before any crawler exists (one line, exit 2; docs/architecture.md, "Platform
contract")."""

from __future__ import annotations

import re
from typing import Any, ClassVar, Literal, TypeVar

import scrapy_spider_metadata
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from scrapy import Spider

from mediacrawler.config import setting
from mediacrawler.spiders._window import check_args


class SpiderParams(BaseModel):
    """Arguments every platform spider takes (``-a name=value``)."""

    model_config = ConfigDict(extra="forbid")

    start: int | None = Field(
        default=None, ge=1, description="First page to fetch (1-based). Overrides a checkpoint. Default: resume or 1."
    )
    max_pages: int | None = Field(default=None, ge=1, description="Stop after fetching this many listing pages.")
    reset_checkpoint: bool = Field(default=False, description="Forget this job's checkpoint and start at page 1.")
    max_height: int | None = Field(
        default=None, ge=1, le=8640, description="Highest video height to download (default: MEDIA_VIDEO_MAX_HEIGHT)."
    )
    video_codecs: str | None = Field(
        default=None, pattern=r"^[A-Za-z0-9.]{1,16}(,[A-Za-z0-9.]{1,16}){0,7}$",
        description="Video codecs in order of preference, e.g. hevc,avc1 (default: MEDIA_VIDEO_CODECS).",
    )
    full: bool = Field(default=False, description="Ignore the high-water mark of earlier runs: walk every page.")
    incremental: bool = Field(
        default=False, description="With -a start: stop at the high-water mark all the same (without it an explicit "
                                   "start walks on past the mark).",
    )
    refresh: int | None = Field(
        default=None, ge=1, le=36500,
        description="Also read again the posts published within this many days, past the high-water mark, to "
                    "refresh their counts in the records database (no media download, no feed line).",
    )
    retry_only: bool = Field(
        default=False, description="Only retry this job's media that failed in earlier runs; fetch no listing."
    )
    since: str | None = Field(
        default=None, max_length=40, description="Only posts published at or after this ISO 8601 date or datetime "
                                                 "(a bare date: midnight in TIME_ZONE).",
    )
    until: str | None = Field(
        default=None, max_length=40, description="Only posts published before this ISO 8601 date or datetime.",
    )
    comments: int | Literal["all"] | None = Field(
        default=None, description="Top-level comments to fetch per post: a number or 'all' (default: none).")
    replies: int | Literal["all"] | None = Field(
        default=None, description="Replies to fetch per comment, with -a comments: a number, 0 or 'all' (default).")
    #: Why this platform's comments cannot be fetched (``-a comments`` is refused with it); ``None``: they can.
    comments_refused: ClassVar[str | None] = None

    @field_validator("comments", "replies", mode="before")
    @classmethod
    def _count_or_all(cls, v: Any) -> Any:
        return count_arg(v)

    @model_validator(mode="after")
    def _comments_supported(self) -> Any:
        if self.comments is not None and self.comments_refused:
            raise ValueError(f"-a comments: {self.comments_refused}")
        if self.replies is not None and self.comments is None:
            raise ValueError("-a replies needs -a comments=<N|all> (replies are walked per fetched comment)")
        if self.comments == 0:
            raise ValueError("-a comments=0 fetches nothing: leave it out, or give a number >= 1 or 'all'")
        return self

    @model_validator(mode="after")
    def _full_or_incremental(self) -> Any:
        if self.full and self.incremental:
            raise ValueError("give -a full=true (ignore the high-water mark) or -a incremental=true (stop at it), "
                             "not both")
        return self

    @model_validator(mode="after")
    def _window(self) -> Any:
        check_args(self.since, self.until)
        return self

    @model_validator(mode="before")
    @classmethod
    def _drop_private(cls, data: Any) -> Any:
        # scrapyd passes its own "_job" (and similar "_"-names) as spider arguments; they are not ours to validate.
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if not str(k).startswith("_")}
        return data


_M = TypeVar("_M", bound=BaseModel)
_P = TypeVar("_P", bound=BaseModel)

#: The keyword argument ``PlatformSpider.from_crawler`` gives a spider built as a worker: this worker's id.
WORKER_KWARG = "_mc_worker"


class Args(scrapy_spider_metadata.Args[_P]):
    """scrapy-spider-metadata's ``Args`` (the keyword arguments validated into ``self.args``), except for a spider
    built as a worker (``WORKER_KWARG``): a worker has no job of its own, and each job's arguments are validated
    when it takes the job (``PlatformSpider.take_job``; docs/operations.md, "Many workers on one Redis")."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if kwargs.get(WORKER_KWARG):
            super(scrapy_spider_metadata.Args, self).__init__(*args, **kwargs)  # the rest of the MRO, unvalidated
        else:
            super().__init__(*args, **kwargs)



# --- argument checks shared by the platforms' parameter models (called from their validators) -----------------
def matched_arg(value: Any, *, pattern: re.Pattern[str], message: str) -> str | None:
    """``None`` stays ``None``; anything else as stripped text that ``pattern`` must match, else ``ValueError``."""
    if value is None:
        return None
    text = str(value).strip()
    if not pattern.match(text):
        raise ValueError(message)
    return text


def digits_arg(value: Any, *, what: str, example: str | None = None, most: int = 20) -> str | None:
    """A numeric id of 1 to ``most`` ASCII digits (``None`` stays ``None``): "must be a numeric {what}[, e.g. …]"."""
    if value is None:
        return None
    text = str(value).strip()
    if not (text.isascii() and text.isdigit() and len(text) <= most):
        raise ValueError(f"must be a numeric {what}" + (f", e.g. {example}" if example else ""))
    return text


def keyword_arg(value: str | None, *, most: int = 100, message: str | None = None) -> str | None:
    """A search keyword, stripped, 1 to ``most`` characters (``None`` stays ``None``); ``message`` replaces both
    the "empty" and the "too long" message when given."""
    if value is None:
        return None
    text = value.strip()
    if not text:
        raise ValueError(message or "must not be empty")
    if len(text) > most:
        raise ValueError(message or f"must be at most {most} characters")
    return text


def one_target(model: _M, *, names: tuple[str, ...], message: str, items: tuple[str, ...] = ()) -> _M:
    """``model`` if exactly one of its fields ``names`` is set, else ``ValueError(message)``. ``items``: the
    targets that are lists of items (source kind ``items``), which have no pages to start at or count."""
    if sum(getattr(model, name) is not None for name in names) != 1:
        raise ValueError(message)
    given = next((name for name in items if getattr(model, name) is not None), None)
    paged = [f"-a {name}" for name in ("start", "max_pages") if getattr(model, name, None) is not None]
    if given is not None and paged:
        raise ValueError(f"{' and '.join(paged)} apply to listings; -a {given} is a list of items, walked whole "
                         f"(a run after an interrupted one fetches only the items its checkpoint has not done)")
    return model


def count_arg(value: Any) -> int | str | None:
    """``-a comments``/``-a replies``: ``None``, ``"all"`` or a whole number >= 0, else ``ValueError``."""
    if value is None or isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    text = str(value).strip().lower()
    if text == "all":
        return "all"
    if not (text.isascii() and text.isdigit() and len(text) <= 9):
        raise ValueError("must be a whole number or 'all', e.g. 100")
    return int(text)


def format_validation_error(spider_name: str, error: ValidationError) -> str:
    """A pydantic error as one line: ``weibo: invalid argument uid='abc': must be digits``."""
    parts = []
    for err in error.errors():
        loc = ".".join(str(x) for x in err.get("loc", ()))
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        if loc:
            value = err.get("input")
            shown = f"={value!r}" if isinstance(value, (str, int, float)) else ""
            parts.append(f"invalid argument {loc}{shown}: {msg}")
        else:
            parts.append(msg)
    return f"{spider_name}: " + "; ".join(parts)


def is_distributed(settings: Any) -> bool:
    """True when the crawl uses the shared Redis queue (``REDIS_URL`` set and ``DISTRIBUTED_ENABLED``)."""
    return bool(setting(settings, "REDIS_URL")) and setting(settings, "DISTRIBUTED_ENABLED")


def target_names(spidercls: type[Spider]) -> set[str]:
    """The arguments that name what a spider crawls (its own fields beyond :class:`SpiderParams`, e.g. ``uid``)."""
    model = getattr(spidercls, "params_model", None)
    return set() if model is None else set(model.model_fields) - set(SpiderParams.model_fields)


def is_worker_mode(spidercls: type[Spider], settings: Any, kwargs: dict[str, Any]) -> bool:
    """A distributed crawl given no target argument (none of the spider's own fields beyond :class:`SpiderParams`):
    the spider is a worker that takes its jobs from Redis (docs/operations.md, "Many workers on one Redis")."""
    if getattr(spidercls, "params_model", None) is None or not is_distributed(settings):
        return False
    targets = target_names(spidercls)
    return bool(targets) and not any(k in targets for k in kwargs)


def validate_args(spidercls: type[Spider], kwargs: dict[str, Any]) -> str | None:
    """Check ``-a`` values against the spider's argument model before a crawler exists.

    Returns a one-line error message, or ``None`` when the arguments are valid (or the spider declares none).
    """
    model = getattr(spidercls, "params_model", None)
    if model is None:
        return None
    try:
        model(**kwargs)
    except ValidationError as e:
        return format_validation_error(getattr(spidercls, "name", spidercls.__name__), e)
    return None
