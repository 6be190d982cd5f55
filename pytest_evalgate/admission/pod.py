"""Which weights a Pod references (SPEC section 14).

A Pod references weights through

- an image volume (``spec.volumes[].image.reference``) whose repository path has a ``models``
  segment before its last one, e.g. ``registry.example/models/support@sha256:<hex>``;
- a container, init container or ephemeral container image with such a path (a "modelcar"
  image that carries the weights);
- the annotation ``evalgate.dev/weights-digest: sha256:<hex>`` (several digests may be given,
  separated by commas), for weights the Pod loads some other way.

Image volumes are declared, not guessed from a path alone (issue 37): the annotation
``evalgate.dev/weights-volumes: a,b`` names image volumes that hold weights (checked whatever
their repository), ``evalgate.dev/other-volumes: c`` names image volumes that do not. An image
volume that is in neither list and not under a ``models`` path is ambiguous and denied: naming a
repository differently must not skip the gate. A declared name that is no image volume of the
Pod is denied too (a typo would otherwise leave the real volume unchecked).

Containers are declared the same way: ``evalgate.dev/weights-containers: modelcar`` names
containers (of any of the three lists) whose image carries weights (a modelcar, as KServe's
``storageUri: oci://`` makes one), gated whatever their repository; a declared name that is no
container of the Pod is denied. An undeclared container outside a ``models`` path is an ordinary
image (every Pod has one), not ambiguous.

Contract: :func:`evalgate_pod_weights` returns every reference with its digest, or with the
``problem`` that keeps it from being gated (a tag instead of a digest, a digest that is not
``sha256:`` and 64 lowercase hex digits, an empty annotation). It never raises on a strange Pod:
missing or mistyped fields are skipped, since the API server has validated the Pod's schema.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

EVALGATE_WEIGHTS_ANNOTATION = "evalgate.dev/weights-digest"
EVALGATE_WEIGHTS_VOLUMES_ANNOTATION = "evalgate.dev/weights-volumes"
EVALGATE_OTHER_VOLUMES_ANNOTATION = "evalgate.dev/other-volumes"
EVALGATE_WEIGHTS_CONTAINERS_ANNOTATION = "evalgate.dev/weights-containers"
EVALGATE_MODELS_SEGMENT = "models"

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


@dataclass(frozen=True)
class EvalgateWeightsRef:
    """One weights reference: where it is (``source``), what is written there
    (``reference``), its digest (None when it has none) and why it cannot be gated."""

    source: str
    reference: str
    digest: str | None
    problem: str | None = None


@dataclass(frozen=True)
class EvalgateImageName:
    """An image reference split into repository, tag and digest (either may be None)."""

    repository: str
    tag: str | None
    digest: str | None


def evalgate_split_image(reference: str) -> EvalgateImageName:
    """Split ``[host[:port]/]path[:tag][@algorithm:hex]``; a colon after the last slash starts
    the tag (a colon before it belongs to the registry's port)."""
    name, _, digest = reference.partition("@")
    slash, colon = name.rfind("/"), name.rfind(":")
    if colon > slash:
        return EvalgateImageName(name[:colon], name[colon + 1 :], digest or None)
    return EvalgateImageName(name, None, digest or None)


def evalgate_image_is_weights(reference: str) -> bool:
    """True when the repository path has a ``models`` segment before its last segment."""
    segments = evalgate_split_image(reference).repository.split("/")
    return EVALGATE_MODELS_SEGMENT in segments[:-1]


def evalgate_image_ref(source: str, reference: str) -> EvalgateWeightsRef:
    """The weights reference of an image: its digest, or the problem (tag, bad digest)."""
    image = evalgate_split_image(reference)
    if image.digest is None:
        tag = image.tag or "latest (implied)"
        problem = (
            f"references weights by tag ({tag}), not by digest: "
            f"use {image.repository}@sha256:<digest>"
        )
        return EvalgateWeightsRef(source, reference, None, problem)
    if not _DIGEST.fullmatch(image.digest):
        problem = f"digest {image.digest!r} is not sha256:<64 lowercase hex>"
        return EvalgateWeightsRef(source, reference, None, problem)
    return EvalgateWeightsRef(source, reference, image.digest)


def evalgate_pod_weights(pod: Mapping[str, object]) -> list[EvalgateWeightsRef]:
    """Every weights reference of ``pod``: image volumes, container images and the
    annotation, in that order (duplicates kept: each names its own source)."""
    spec = _mapping(pod.get("spec"))
    annotations = _mapping(_mapping(pod.get("metadata")).get("annotations"))
    declared = _names(annotations.get(EVALGATE_WEIGHTS_VOLUMES_ANNOTATION))
    other = _names(annotations.get(EVALGATE_OTHER_VOLUMES_ANNOTATION))
    carriers = _names(annotations.get(EVALGATE_WEIGHTS_CONTAINERS_ANNOTATION))
    return [
        *_volume_refs(spec, declared, other),
        *_container_refs(spec, carriers),
        *_annotation_refs(pod),
    ]


def _names(value: object) -> frozenset[str]:
    return frozenset(part.strip() for part in str(value or "").split(",") if part.strip())


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _items(value: object) -> Iterator[Mapping[str, Any]]:
    if isinstance(value, list):
        yield from (item for item in value if isinstance(item, Mapping))


def _volume_refs(
    spec: Mapping[str, object], declared: frozenset[str], other: frozenset[str]
) -> Iterator[EvalgateWeightsRef]:
    seen: set[str] = set()
    for volume in _items(spec.get("volumes")):
        reference = _mapping(volume.get("image")).get("reference")
        if not isinstance(reference, str):
            continue
        name = str(volume.get("name"))
        seen.add(name)
        source = f'image volume "{name}"'
        if name in declared and name in other:
            problem = f"declared both in {EVALGATE_WEIGHTS_VOLUMES_ANNOTATION} and other-volumes"
            yield EvalgateWeightsRef(source, reference, None, problem)
        elif name in declared or evalgate_image_is_weights(reference):
            yield evalgate_image_ref(source, reference)
        elif name not in other:
            problem = (
                "ambiguous: an image volume neither under a models/ path nor declared; name it "
                f"in the annotation {EVALGATE_WEIGHTS_VOLUMES_ANNOTATION} (weights) or "
                f"{EVALGATE_OTHER_VOLUMES_ANNOTATION} (not weights)"
            )
            yield EvalgateWeightsRef(source, reference, None, problem)
    for name in sorted((declared | other) - seen):
        source = f"annotation {EVALGATE_WEIGHTS_VOLUMES_ANNOTATION}"
        if name in other:
            source = f"annotation {EVALGATE_OTHER_VOLUMES_ANNOTATION}"
        yield EvalgateWeightsRef(source, name, None, f"{name!r} is no image volume of the Pod")


def _container_refs(
    spec: Mapping[str, object], carriers: frozenset[str]
) -> Iterator[EvalgateWeightsRef]:
    seen: set[str] = set()
    for field in _CONTAINER_LISTS:
        for container in _items(spec.get(field)):
            image, name = container.get("image"), str(container.get("name"))
            seen.add(name)
            if not isinstance(image, str):
                continue
            if name in carriers or evalgate_image_is_weights(image):
                yield evalgate_image_ref(f'{_singular(field)} "{name}"', image)
    source = f"annotation {EVALGATE_WEIGHTS_CONTAINERS_ANNOTATION}"
    for name in sorted(carriers - seen):
        yield EvalgateWeightsRef(source, name, None, f"{name!r} is no container of the Pod")


def _singular(field: str) -> str:
    return {"initContainers": "init container", "ephemeralContainers": "ephemeral container"}.get(
        field, "container"
    )


def _annotation_refs(pod: Mapping[str, object]) -> Iterator[EvalgateWeightsRef]:
    annotations = _mapping(_mapping(pod.get("metadata")).get("annotations"))
    if EVALGATE_WEIGHTS_ANNOTATION not in annotations:
        return
    value = annotations[EVALGATE_WEIGHTS_ANNOTATION]
    source = f"annotation {EVALGATE_WEIGHTS_ANNOTATION}"
    parts = [part.strip() for part in str(value).split(",")]
    if not any(parts):
        yield EvalgateWeightsRef(source, str(value), None, "the annotation is empty")
        return
    for part in parts:
        if _DIGEST.fullmatch(part):
            yield EvalgateWeightsRef(source, part, part)
        else:
            problem = f"{part!r} is not a weights digest sha256:<64 lowercase hex> (a tag?)"
            yield EvalgateWeightsRef(source, part, None, problem)
