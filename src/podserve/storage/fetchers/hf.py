"""hf://org/name@revision sources through huggingface_hub (the `[hf]` extra).

huggingface_hub downloads into its own cache (`SourceOptions.hf_cache_dir`, else a
directory in this fetch's staging state, so that an interrupted download resumes its
`.incomplete` blobs); the snapshot's files are then hard-linked (copied across
filesystems) into the staging directory, so the published entry holds real files and no
symlinks into a cache that may be cleaned. With `hf_offline` nothing is asked of the
network: the files must already be in `hf_cache_dir` (a mirror prepared in the image or
on a volume). `HF_ENDPOINT` or `hf_endpoint` points at a self-hosted mirror.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from podserve.storage.digest import iter_model_files
from podserve.storage.errors import (
    FetchNetworkError,
    MissingExtra,
    ModelNotFoundAtSource,
    SourceAccessDenied,
)
from podserve.storage.fetchers.base import SourceOptions, StagingArea
from podserve.storage.progress import Phase, Progress
from podserve.storage.uri import ModelURI


class HfFetcher:
    __slots__ = ("_options",)

    def __init__(self, options: SourceOptions) -> None:
        self._options = options

    def fetch(self, uri: ModelURI, staging: StagingArea, progress: Progress) -> None:
        try:
            from huggingface_hub import snapshot_download
            from huggingface_hub.errors import (
                GatedRepoError,
                HfHubHTTPError,
                LocalEntryNotFoundError,
                RepositoryNotFoundError,
                RevisionNotFoundError,
            )
        except ImportError as exc:
            raise MissingExtra(scheme="hf", extra="hf", module="huggingface_hub") from exc

        opts = self._options
        cache_dir = opts.hf_cache_dir or staging.state / "hf-cache"
        progress.phase(Phase.DOWNLOADING, f"{uri} via huggingface_hub")
        try:
            snapshot = snapshot_download(
                uri.location,
                revision=uri.revision,
                cache_dir=cache_dir,
                local_files_only=opts.hf_offline,
                endpoint=opts.hf_endpoint,
                etag_timeout=opts.timeout_s,
            )
        except GatedRepoError as exc:
            raise SourceAccessDenied(f"{uri}: gated repository; set HF_TOKEN ({exc})") from exc
        except (RepositoryNotFoundError, RevisionNotFoundError) as exc:
            raise ModelNotFoundAtSource(f"{uri}: {exc}") from exc
        except LocalEntryNotFoundError as exc:
            if opts.hf_offline:
                raise ModelNotFoundAtSource(
                    f"{uri}: not in the offline Hugging Face cache {cache_dir}"
                ) from exc
            raise FetchNetworkError(f"{uri}: cannot reach the hub ({exc})") from exc
        except HfHubHTTPError as exc:
            raise FetchNetworkError(f"{uri}: {exc}") from exc
        except OSError as exc:
            raise FetchNetworkError(f"{uri}: {exc}") from exc
        if not isinstance(snapshot, str):  # only dry_run returns a list
            raise TypeError("snapshot_download returned a dry-run listing")
        files = dict(iter_model_files(Path(snapshot)))
        staging.prune(set(files))
        for rel, src in sorted(files.items()):
            part = staging.partial(rel)
            size = src.stat().st_size
            if part.final.is_file() and part.final.stat().st_size == size:
                continue
            progress.file_started(rel, size, 0)
            _link_or_copy(src.resolve(), part.final)
            progress.file_advanced(rel, size)
            progress.file_finished(rel)


def _link_or_copy(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.unlink(missing_ok=True)
    try:
        os.link(src, dest)
    except OSError:
        # Another filesystem (or one without hard links): copy, via a temp name so a
        # killed copy is never mistaken for a finished file.
        tmp = dest.with_name(dest.name + ".copying")
        shutil.copyfile(src, tmp)
        os.replace(tmp, dest)
