"""A decoded Wren MDL document read into :class:`~wrenmem.schema.mdl.Manifest` records,
defensively: a document that is not a manifest raises :class:`ManifestError` naming the
element; a single bad item is skipped and named in ``Manifest.warnings``. Also the
manifest's fingerprint. :mod:`wrenmem.schema.manifest` decodes the file and calls these."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from wrenmem.errors import ManifestError
from wrenmem.schema.mdl import (
    JOIN_TYPES,
    MAX_ITEM_CHARS,
    SECTIONS,
    Column,
    Cube,
    CubeField,
    Manifest,
    Model,
    Relationship,
    View,
)


def parse_manifest(document: Any, path: str = "<manifest>", *, _public: bool = False,
                   reuse: Mapping[str, Model] | None = None) -> Manifest:
    """Build a :class:`Manifest` from decoded JSON, skipping (and naming) bad items.

    Each model read without a warning gets a key, a hash of its JSON (``model_keys``); a
    model whose key is in ``reuse`` (an earlier read's models by key) is not parsed again:
    the same JSON makes the same model. The keys cost nothing extra: the fingerprint's
    canonical JSON is made of the same pieces.
    """
    if not isinstance(document, dict):
        raise ManifestError(f"{path}: a manifest must be a JSON object, not {_kind(document)}")
    public = document if _public else _without_private(document)
    warnings: list[str] = []
    sections: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for section in SECTIONS:
        value = public.get(section)
        if value is None:
            sections[section] = []
            continue
        if not isinstance(value, list):
            raise ManifestError(f"{path}: '{section}' must be a list, not {_kind(value)}")
        sections[section] = _named_items(value, section, warnings)
    digest, pieces = _fingerprint_pieces(public)
    models_list: list[Model] = []
    keys: list[str] = []
    for where, item in sections["models"]:
        key = hashlib.blake2b(pieces[where].encode("utf-8", "surrogatepass"),
                              digest_size=16).hexdigest() if where in pieces else ""
        model = reuse.get(key) if reuse is not None and key else None
        if model is None:
            before = len(warnings)
            model = _model(where, item, warnings)
            if len(warnings) != before:
                key = ""  # its warnings name its place: read it again next time
        models_list.append(model)
        keys.append(key)
    models = tuple(models_list)
    model_names = {m.name for m in models}
    relationships = tuple(r for where, item in sections["relationships"]
                          if (r := _relationship(where, item, model_names, warnings)))
    views = tuple(View(item["name"], _text(item, "statement", where, warnings),
                       _description(item, where, warnings))
                  for where, item in sections["views"])
    cubes = tuple(_cube(where, item, warnings) for where, item in sections["cubes"])
    source, source_warnings = _source(public)
    return Manifest(
        source=source,
        catalog=_text(document, "catalog", "manifest", warnings),
        schema=_text(document, "schema", "manifest", warnings),
        data_source=_text(document, "dataSource", "manifest", warnings),
        description=_text(document, "description", "manifest", warnings),
        models=models, relationships=relationships, views=views, cubes=cubes,
        fingerprint=digest, warnings=(*source_warnings, *warnings), path=path,
        model_keys=tuple(keys),
    )


def _source(document: Mapping[str, Any]) -> tuple[str, tuple[str, ...]]:
    """What a converted document was read from (``schemaSource``) and its reader's
    warnings; a Wren MDL has none."""
    block = document.get("schemaSource")
    if not isinstance(block, dict) or not isinstance(block.get("kind"), str):
        return "Wren MDL", ()
    found = block.get("warnings")
    return block["kind"], tuple(str(w) for w in found) if isinstance(found, list) else ()


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"),
                      default=str)


def fingerprint(document: Any, *, _public: bool = False) -> str:
    """Stable hash of a decoded manifest; keys starting with ``_`` (at any depth) are ignored."""
    public = document if _public else _without_private(document)
    return _digest(_canonical(public))


def _digest(payload: str) -> str:
    return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _fingerprint_pieces(document: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """:func:`fingerprint` of a public document, and the canonical JSON of each model by its
    ``where`` (``models[3] 'orders'``): the document's canonical JSON is assembled from them
    (the same text ``json.dumps`` makes: keys sorted, a list's items joined by commas)."""
    models = document.get("models")
    if not isinstance(models, list):
        return _digest(_canonical(document)), {}
    texts = [_canonical(m) for m in models]
    parts = []
    for key in sorted(document):
        value = "[" + ",".join(texts) + "]" if key == "models" else _canonical(document[key])
        parts.append(f"{_canonical(key)}:{value}")
    pieces = {}
    for i, (model, text) in enumerate(zip(models, texts, strict=True)):
        name = model.get("name") if isinstance(model, dict) else None
        if isinstance(name, str) and name.strip():
            pieces[f"models[{i}] '{name.strip()}'"] = text
    return _digest("{" + ",".join(parts) + "}"), pieces


def _without_private(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _without_private(v) for k, v in value.items()
                if not str(k).startswith("_")}
    if isinstance(value, list):
        return [_without_private(v) for v in value]
    return value


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
             int: "a number", float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _named_items(items: list[Any], section: str, warnings: list[str]
                 ) -> list[tuple[str, dict[str, Any]]]:
    """Items that are objects with a unique non-empty string name, as (where, item)."""
    out: list[tuple[str, dict[str, Any]]] = []
    seen: set[str] = set()
    for i, item in enumerate(items):
        where = f"{section}[{i}]"
        if not isinstance(item, dict):
            warnings.append(f"{where}: skipped, expected an object, got {_kind(item)}")
            continue
        name = item.get("name")
        if not isinstance(name, str) or not name.strip():
            got = "no name" if name is None or name == "" else f"name {_kind(name)}"
            warnings.append(f"{where}: skipped, it has {got} (a non-empty string is needed)")
            continue
        name = name.strip()
        where = f"{where} '{name}'"
        if name in seen:
            warnings.append(f"{where}: skipped, the name is used twice in '{section}'")
            continue
        seen.add(name)
        out.append((where, {**item, "name": name}))
    return out


def _text(obj: Mapping[str, Any], key: str, where: str, warnings: list[str]) -> str:
    """A string field; numbers are stringified, other types dropped with a warning."""
    value = obj.get(key)
    if value is None:
        return ""
    if isinstance(value, str):
        return _cut(value.strip(), where, key, warnings)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _cut(str(value), where, key, warnings)
    warnings.append(f"{where}: '{key}' ignored, expected a string, got {_kind(value)}")
    return ""


def _cut(text: str, where: str, key: str, warnings: list[str]) -> str:
    """``text`` held to :data:`MAX_ITEM_CHARS`, the cut marked in it and warned about."""
    if len(text) <= MAX_ITEM_CHARS:
        return text
    warnings.append(f"{where}: '{key}' cut to {MAX_ITEM_CHARS:,} of its {len(text):,} "
                    "characters")
    return f"{text[:MAX_ITEM_CHARS]} … [cut: {len(text):,} characters, {MAX_ITEM_CHARS:,} kept]"


def _flag(obj: Mapping[str, Any], key: str, where: str, warnings: list[str]) -> bool:
    value = obj.get(key)
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    warnings.append(f"{where}: '{key}' ignored, expected true or false, got {_kind(value)}")
    return False


def _properties(obj: Mapping[str, Any], where: str, warnings: list[str]) -> dict[str, Any]:
    props = obj.get("properties")
    if props is None:
        return {}
    if not isinstance(props, dict):
        warnings.append(f"{where}: 'properties' ignored, expected an object, got {_kind(props)}")
        return {}
    return props


def _prop(props: Mapping[str, Any], keys: tuple[str, ...], where: str,
          warnings: list[str]) -> str:
    """First of ``keys`` (camelCase first, then snake_case) holding a non-empty value."""
    for key in keys:
        text = _text(props, key, where, warnings)
        if text:
            return text
    return ""


def _description(obj: Mapping[str, Any], where: str, warnings: list[str]) -> str:
    props = _properties(obj, where, warnings)
    return (_prop(props, ("description",), where + ".properties", warnings)
            or _text(obj, "description", where, warnings))


def _string_list(value: Any, where: str, key: str, warnings: list[str]) -> tuple[str, ...]:
    """A list of strings, or a comma-separated string, with empty parts dropped."""
    if value is None:
        return ()
    if isinstance(value, str):
        parts = value.split(",")
    elif isinstance(value, list):
        parts = [str(v) for v in value if v is not None and not isinstance(v, (dict, list))]
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        parts = [str(value)]
    else:
        warnings.append(f"{where}: '{key}' ignored, expected a list, got {_kind(value)}")
        return ()
    return tuple(dict.fromkeys(p.strip() for p in parts if p.strip()))


def _model(where: str, item: dict[str, Any], warnings: list[str]) -> Model:
    props = _properties(item, where, warnings)
    pk_raw = item.get("primaryKey")
    primary_key = _string_list(pk_raw, where, "primaryKey", warnings)
    columns: list[Column] = []
    raw_columns = item.get("columns")
    if raw_columns is not None and not isinstance(raw_columns, list):
        warnings.append(f"{where}: 'columns' ignored, expected a list, got {_kind(raw_columns)}")
        raw_columns = None
    for cwhere, col in _named_items(raw_columns or [], f"{where}.columns", warnings):
        columns.append(_column(cwhere, col, primary_key, warnings))
    return Model(
        name=item["name"], columns=tuple(columns), primary_key=primary_key,
        description=_description(item, where, warnings),
        layer=_prop(props, ("dbtLayer", "dbt_layer"), where, warnings).lower(),
        data_scope=_prop(props, ("dataScope", "data_scope"), where, warnings),
    )


def _column(where: str, col: dict[str, Any], primary_key: tuple[str, ...],
            warnings: list[str]) -> Column:
    props = _properties(col, where, warnings)
    accepted_raw = next((props[k] for k in ("acceptedValues", "accepted_values")
                         if props.get(k) not in (None, "")), None)
    name = col["name"]
    return Column(
        name=name,
        type=_text(col, "type", where, warnings),
        description=_description(col, where, warnings),
        is_calculated=_flag(col, "isCalculated", where, warnings),
        expression=_text(col, "expression", where, warnings),
        relationship=_text(col, "relationship", where, warnings),
        not_null=_flag(col, "notNull", where, warnings),
        is_primary_key=_flag(col, "isPrimaryKey", where, warnings) or name in primary_key,
        is_hidden=_flag(col, "isHidden", where, warnings),
        accepted_values=_string_list(accepted_raw, where, "accepted_values", warnings),
        derived_from=_prop(props, ("derivedFrom", "derived_from"), where, warnings),
        dbt_tests=_string_list(next((props[k] for k in ("dbtTests", "dbt_tests")
                                     if props.get(k) not in (None, "")), None),
                               where, "dbt_tests", warnings),
        dbt_test_status=_prop(props, ("dbtTestStatus", "dbt_test_status"), where, warnings),
    )


def _relationship(where: str, item: dict[str, Any], model_names: set[str],
                  warnings: list[str]) -> Relationship | None:
    models = item.get("models")
    if (not isinstance(models, list) or len(models) != 2
            or not all(isinstance(m, str) and m.strip() for m in models)):
        warnings.append(f"{where}: skipped, 'models' must be a list of two model names, "
                        f"got {json.dumps(models, default=str)[:80]}")
        return None
    left, right = (m.strip() for m in models)
    for end in (left, right):
        if end not in model_names:
            warnings.append(f"{where}: refers to model '{end}', which is not in the manifest")
    join_type = _text(item, "joinType", where, warnings).upper()
    if join_type and join_type not in JOIN_TYPES:
        warnings.append(f"{where}: unknown joinType '{join_type}'")
    return Relationship(item["name"], left, right, join_type,
                        " ".join(_text(item, "condition", where, warnings).split()),
                        _description(item, where, warnings))


def _cube(where: str, item: dict[str, Any], warnings: list[str]) -> Cube:
    def fields_of(key: str) -> tuple[CubeField, ...]:
        raw = item.get(key)
        if raw is not None and not isinstance(raw, list):
            warnings.append(f"{where}: '{key}' ignored, expected a list, got {_kind(raw)}")
            raw = None
        return tuple(
            CubeField(f["name"], _text(f, "expression", fw, warnings),
                      _text(f, "type", fw, warnings), _description(f, fw, warnings),
                      _string_list(f.get("granularities"), fw, "granularities", warnings))
            for fw, f in _named_items(raw or [], f"{where}.{key}", warnings))

    hierarchies: list[tuple[str, tuple[str, ...]]] = []
    raw_h = item.get("hierarchies")
    if isinstance(raw_h, dict):
        for hname, levels in raw_h.items():
            names = _string_list(levels, f"{where}.hierarchies", str(hname), warnings)
            if names:
                hierarchies.append((str(hname), names))
    elif raw_h is not None:
        warnings.append(f"{where}: 'hierarchies' ignored, expected an object, got "
                        f"{_kind(raw_h)}")
    return Cube(item["name"], _text(item, "baseObject", where, warnings),
                _description(item, where, warnings), fields_of("measures"),
                fields_of("dimensions"), fields_of("timeDimensions"), tuple(hierarchies))
