"""A dbt ``manifest.json`` (and its ``catalog.json``) read into a Wren MDL document: models,
tests as facts, semantic models as cubes (docs/schema-sources.md says what becomes what)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from wrenmem.fs.fsutil import read_regular_file
from wrenmem.schema.sources import DBT, source_block
from wrenmem.schema.sources.ddl import key_relationship

TABLE_TYPES = ("model", "seed", "snapshot")
_REF = re.compile(r"""ref\(\s*(?:['"][^'"]+['"]\s*,\s*)?['"]([^'"]+)['"]""")
_SOURCE = re.compile(r"""source\(\s*['"]([^'"]+)['"]\s*,\s*['"]([^'"]+)['"]""")
_CATALOG_BYTES = 50_000_000


def dbt_document(document: dict[str, Any], path: str) -> dict[str, Any]:
    """The MDL document of the dbt manifest ``document`` read from ``path``."""
    return _Reader(document, path).document()


class _Reader:
    def __init__(self, document: dict[str, Any], path: str):
        self.doc = document
        self.path = path
        self.warnings: list[str] = []
        self.models: dict[str, dict[str, Any]] = {}  # unique_id -> model document
        self.names: dict[str, str] = {}  # lower-case relation name -> unique_id
        self.by_dbt_name: dict[str, str] = {}  # dbt name (ref) -> unique_id
        self.sources: dict[tuple[str, str], str] = {}  # (source, table) -> unique_id
        self.relationships: list[dict[str, Any]] = []
        self.seen: set[str] = set()

    def _section(self, key: str) -> dict[str, Any]:
        value = self.doc.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.warnings.append(f"'{key}' ignored, expected an object, got "
                                 f"{type(value).__name__}")
            return {}
        return value

    def document(self) -> dict[str, Any]:
        meta = _dict(self.doc.get("metadata"))
        types = _catalog_types(Path(self.path).with_name("catalog.json"), self.warnings)
        nodes = self._section("nodes")
        first: dict[str, Any] = {}
        for uid, node in nodes.items():
            if isinstance(node, dict) and node.get("resource_type") in TABLE_TYPES:
                self._table(uid, node, types)
                first = first or node
        for uid, node in self._section("sources").items():
            if isinstance(node, dict):
                self._table(uid, node, types)
                first = first or node
        for uid, node in nodes.items():
            if isinstance(node, dict) and node.get("resource_type") == "test":
                self._test(uid, node)
        for model in self.models.values():
            self._constraints(model)
        cubes = self._cubes()
        for model in self.models.values():
            model.pop("_uid", None)
            model.pop("_constraints", None)
            for column in model["columns"]:
                column.pop("_unique", None)
                column.pop("_constraints", None)
        return {
            "catalog": _str(first.get("database")),
            "schema": _str(first.get("schema")),
            "dataSource": _str(meta.get("adapter_type")),
            "models": list(self.models.values()),
            "relationships": self.relationships,
            "cubes": cubes,
            "schemaSource": source_block(DBT, self.warnings),
        }

    # -- tables ---------------------------------------------------------------------
    def _table(self, uid: str, node: dict[str, Any], types: dict[str, dict[str, str]]) -> None:
        kind = str(node.get("resource_type") or "source")
        config = _dict(node.get("config"))
        if config.get("enabled") is False or config.get("materialized") == "ephemeral":
            return  # disabled, or a CTE inlined into other models: no table of its own
        name = _str(node.get("identifier") if kind == "source" else None) or _str(
            node.get("alias")) or _str(node.get("name"))
        if not name:
            self.warnings.append(f"{uid}: skipped, it has no name")
            return
        if name.lower() in self.names:
            self.warnings.append(f"{uid}: skipped, '{name}' is also "
                                 f"{self.names[name.lower()]}")
            return
        known = types.get(uid, {})
        columns = []
        raw = _dict(node.get("columns"))
        for key, col in raw.items():
            if not isinstance(col, dict):
                continue
            cname = _str(col.get("name")) or str(key)
            column: dict[str, Any] = {
                "name": cname,
                "type": _str(col.get("data_type")) or known.get(cname.lower(), "")}
            if _str(col.get("description")):
                column["properties"] = {"description": _str(col.get("description"))}
            if isinstance(col.get("constraints"), list):
                column["_constraints"] = col["constraints"]
            columns.append(column)
        declared = {c["name"].lower() for c in columns}
        # columns the catalog knows and the YAML does not document
        for cname, ctype in known.items():
            if cname not in declared:
                columns.append({"name": types.get(f"{uid}#names", {}).get(cname, cname),
                                "type": ctype})
        model: dict[str, Any] = {"name": name, "columns": columns, "_uid": uid}
        description = _str(node.get("description"))
        properties: dict[str, Any] = {}
        if description:
            properties["description"] = description
        layer = _layer(kind, node)
        if layer:
            properties["dbtLayer"] = layer
        if properties:
            model["properties"] = properties
        if isinstance(node.get("constraints"), list):
            model["_constraints"] = node["constraints"]
        self.models[uid] = model
        self.names[name.lower()] = uid
        if kind == "source":
            self.sources[(_str(node.get("source_name")), _str(node.get("name")))] = uid
        else:
            self.by_dbt_name.setdefault(_str(node.get("name")), uid)

    def _target(self, text: Any) -> str | None:
        """The unique id of the model ``ref('x')`` or ``source('s', 't')`` names."""
        text = _str(text)
        found = _REF.search(text)
        if found:
            return self.by_dbt_name.get(found.group(1))
        found = _SOURCE.search(text)
        if found:
            return self.sources.get((found.group(1), found.group(2)))
        return self.by_dbt_name.get(text) if text else None

    def _column(self, uid: str, name: str) -> dict[str, Any] | None:
        model = self.models.get(uid)
        if model is None or not name:
            return None
        name = name.strip('"`[]')
        for column in model["columns"]:
            if column["name"].lower() == name.lower():
                return column
        column = {"name": name, "type": ""}  # tested, so it exists: add it
        model["columns"].append(column)
        return column

    # -- tests and constraints ------------------------------------------------------
    def _test(self, uid: str, node: dict[str, Any]) -> None:
        meta = node.get("test_metadata")
        if not isinstance(meta, dict):
            return  # a singular test: SQL, nothing to read
        test = _str(meta.get("name"))
        kwargs = _dict(meta.get("kwargs"))
        attached = _str(node.get("attached_node"))
        if not attached:
            depends = _names(_dict(node.get("depends_on")).get("nodes"))
            attached = next((d for d in depends if d in self.models), "")
        column = self._column(attached, _str(node.get("column_name"))
                              or _str(kwargs.get("column_name")))
        if column is None:
            return
        props = column.setdefault("properties", {})
        props.setdefault("dbtTests", [])
        if test not in props["dbtTests"]:
            props["dbtTests"].append(test)
        if test == "not_null":
            column["notNull"] = True
        elif test == "unique":
            column["_unique"] = True
        elif test == "accepted_values" and isinstance(kwargs.get("values"), list):
            props["acceptedValues"] = [str(v) for v in kwargs["values"] if v is not None]
        elif test == "relationships":
            target = self._target(kwargs.get("to"))
            field = _str(kwargs.get("field"))
            if target is None or not field:
                self.warnings.append(f"{uid}: relationship ignored, it refers to "
                                     f"{kwargs.get('to')!r}, which is not in the manifest")
                return
            self._relationship(attached, (column["name"],), target, (field,))

    def _relationship(self, uid: str, columns: tuple[str, ...], target: str,
                      to: tuple[str, ...]) -> None:
        model, other = self.models[uid], self.models[target]
        for n in to:
            self._column(target, n)
        self.relationships.append(key_relationship(model["name"], columns, other["name"], to,
                                                   model, self.seen))

    def _constraints(self, model: dict[str, Any]) -> None:
        uid = model["_uid"]
        pk: list[str] = []
        for constraint in _list(model.get("_constraints")):
            if not isinstance(constraint, dict):
                continue
            columns = [str(c) for c in _list(constraint.get("columns")) if c]
            if constraint.get("type") == "primary_key":
                pk = columns
            elif constraint.get("type") == "foreign_key":
                self._foreign(uid, tuple(columns), constraint)
        for column in model["columns"]:
            for constraint in _list(column.get("_constraints")):
                if not isinstance(constraint, dict):
                    continue
                if constraint.get("type") == "primary_key":
                    pk = [column["name"]]
                elif constraint.get("type") == "not_null":
                    column["notNull"] = True
                elif constraint.get("type") == "foreign_key":
                    self._foreign(uid, (column["name"],), constraint)
        if not pk:
            tested = [c["name"] for c in model["columns"] if c.get("_unique") and c.get(
                "notNull")]
            pk = tested if len(tested) == 1 else []
        if pk:
            model["primaryKey"] = pk
            for column in model["columns"]:
                if column["name"] in pk:
                    column["isPrimaryKey"] = True

    def _foreign(self, uid: str, columns: tuple[str, ...], constraint: dict[str, Any]) -> None:
        target = self._target(constraint.get("to"))
        to = tuple(str(c) for c in _list(constraint.get("to_columns")) if c)
        if target is None and constraint.get("expression"):  # dbt < 1.9: "table (column)"
            found = re.match(r"\s*([\w.\"]+)\s*\(([^)]*)\)", _str(constraint["expression"]))
            if found:
                name = found.group(1).split(".")[-1].strip('"').lower()
                target = self.names.get(name)
                to = tuple(c.strip().strip('"') for c in found.group(2).split(","))
        if target is None or len(to) != len(columns) or not columns:
            self.warnings.append(f"{uid}: foreign key ignored, its target is not in the "
                                 "manifest or its columns do not match")
            return
        self._relationship(uid, columns, target, to)

    # -- semantic layer -------------------------------------------------------------
    def _cubes(self) -> list[dict[str, Any]]:
        cubes: dict[str, dict[str, Any]] = {}  # semantic model unique id -> cube
        measure_cube: dict[str, str] = {}  # measure name -> semantic model unique id
        entities: dict[str, list[tuple[str, str, str]]] = {}  # entity -> (type, uid, expr)
        for uid, sm in self._section("semantic_models").items():
            if not isinstance(sm, dict) or not _str(sm.get("name")):
                continue
            target = self._target(sm.get("model"))
            if target is None:
                depends = _names(_dict(sm.get("depends_on")).get("nodes"))
                target = next((d for d in depends if d in self.models), None)
            base = self.models[target]["name"] if target else ""
            cube: dict[str, Any] = {"name": _str(sm["name"]), "baseObject": base,
                                    "measures": [], "dimensions": [], "timeDimensions": []}
            if _str(sm.get("description")):
                cube["description"] = _str(sm.get("description"))
            for m in _list(sm.get("measures")):
                if not isinstance(m, dict) or not _str(m.get("name")):
                    continue
                agg = _str(m.get("agg")).lower()
                expr = _str(m.get("expr")) or _str(m.get("name"))
                call = {"count_distinct": f"COUNT(DISTINCT {expr})",
                        "sum_boolean": f"SUM(CAST({expr} AS INTEGER))",
                        "median": f"MEDIAN({expr})",
                        "percentile": f"PERCENTILE({expr})"}.get(agg) or (
                    f"{agg.upper()}({expr})" if agg else expr)
                measure = {"name": _str(m["name"]), "expression": call, "type": agg}
                if _str(m.get("description")):
                    measure["description"] = _str(m.get("description"))
                cube["measures"].append(measure)
                measure_cube.setdefault(measure["name"], uid)
            for d in _list(sm.get("dimensions")):
                if not isinstance(d, dict) or not _str(d.get("name")):
                    continue
                field: dict[str, Any] = {"name": _str(d["name"]),
                                         "expression": _str(d.get("expr")) or _str(d["name"])}
                if _str(d.get("description")):
                    field["description"] = _str(d.get("description"))
                if _str(d.get("type")).lower() == "time":
                    params = _dict(d.get("type_params"))
                    grain = _str(params.get("time_granularity"))
                    if grain:
                        field["granularities"] = [grain]
                    cube["timeDimensions"].append(field)
                else:
                    cube["dimensions"].append(field)
            for e in _list(sm.get("entities")):
                if isinstance(e, dict) and _str(e.get("name")) and target:
                    entities.setdefault(_str(e["name"]), []).append(
                        (_str(e.get("type")).lower(), target,
                         _str(e.get("expr")) or _str(e["name"])))
            cubes[uid] = cube
        self._entity_joins(entities)
        self._metrics(cubes, measure_cube)
        return list(cubes.values())

    def _entity_joins(self, entities: dict[str, list[tuple[str, str, str]]]) -> None:
        """A foreign entity joins the semantic model whose primary entity has its name."""
        joined = {tuple(sorted(r["models"])) for r in self.relationships}
        for kinds in entities.values():
            primary = [(uid, expr) for kind, uid, expr in kinds if kind in ("primary",
                                                                            "unique", "natural")]
            if len(primary) != 1:
                continue
            target, key = primary[0]
            for kind, uid, expr in kinds:
                pair = tuple(sorted((self.models[uid]["name"], self.models[target]["name"])))
                if kind != "foreign" or uid == target or pair in joined:
                    continue
                if not _plain(expr) or not _plain(key):
                    continue
                self._column(uid, expr)
                self._relationship(uid, (expr,), target, (key,))
                joined.add(pair)

    def _metrics(self, cubes: dict[str, dict[str, Any]], measure_cube: dict[str, str]) -> None:
        metrics = {uid: m for uid, m in self._section("metrics").items()
                   if isinstance(m, dict) and _str(m.get("name"))}
        home: dict[str, str] = {}  # metric name -> semantic model unique id
        pending = dict(metrics)
        for _ in range(len(metrics) + 1):  # a derived metric is placed after its inputs
            placed = False
            for uid, metric in list(pending.items()):
                params = _dict(metric.get("type_params"))
                inputs = [_input_name(params.get(k)) for k in ("measure", "numerator",
                                                               "denominator")]
                inputs += [_input_name(m) for m in _list(params.get("metrics"))]
                inputs += [_input_name(m) for m in _list(params.get("input_measures"))]
                cube = next((measure_cube[n] for n in inputs if n in measure_cube), None) or \
                    next((home[n] for n in inputs if n in home), None)
                if cube is None and any(n and n in pending for n in inputs):
                    continue  # its inputs are not placed yet
                del pending[uid]
                placed = True
                if cube is None:
                    self.warnings.append(f"{uid}: metric ignored, it is computed from no "
                                         "semantic model in the manifest")
                    continue
                home[_str(metric["name"])] = cube
                self._metric_measure(cubes[cube], metric, params, inputs)
            if not placed or not pending:
                break
        for uid in pending:
            self.warnings.append(f"{uid}: metric ignored, its inputs are not in the manifest")

    def _metric_measure(self, cube: dict[str, Any], metric: dict[str, Any],
                        params: dict[str, Any], inputs: list[str]) -> None:
        kind = _str(metric.get("type")).lower()
        if kind == "ratio":
            expression = f"{inputs[1]} / {inputs[2]}"
        elif kind == "derived":
            expression = _str(params.get("expr"))
        elif kind == "cumulative":
            expression = f"cumulative {inputs[0]}"
        else:
            expression = inputs[0] or _str(metric["name"])
        parts = [_str(metric.get("label")), _str(metric.get("description"))]
        where = metric.get("filter")
        if isinstance(where, dict):
            filters = [_str(f.get("where_sql_template")) for f in
                       _list(where.get("where_filters")) if isinstance(f, dict)]
            if any(filters):
                parts.append("Filter: " + " AND ".join(f for f in filters if f))
        description = ". ".join(p.rstrip(".") for p in parts if p)
        name = _str(metric["name"])
        existing = next((m for m in cube["measures"] if m["name"] == name), None)
        if existing is not None:  # the metric of a measure of its name: one item
            if description:
                existing["description"] = description
            return
        measure = {"name": name, "expression": expression, "type": f"metric ({kind})"
                   if kind else "metric"}
        if description:
            measure["description"] = description
        cube["measures"].append(measure)


def _index(column: dict[str, Any]) -> int:
    index = column.get("index")
    return index if isinstance(index, int) else 0


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _names(value: Any) -> list[str]:
    return [v for v in _list(value) if isinstance(v, str)]


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _input_name(value: Any) -> str:
    if isinstance(value, dict):
        return _str(value.get("name"))
    return _str(value)


def _plain(name: str) -> bool:
    return re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) is not None


def _layer(kind: str, node: dict[str, Any]) -> str:
    if kind in ("source", "seed", "snapshot"):
        return kind
    fqn = node.get("fqn")
    if isinstance(fqn, list) and len(fqn) > 2:
        return str(fqn[1])  # the folder under models/: staging, marts…
    return ""


def _str(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def _catalog_types(path: Path, warnings: list[str]) -> dict[str, dict[str, str]]:
    """Column types by unique id and lower-case column name, from ``catalog.json``."""
    try:
        data = read_regular_file(path, _CATALOG_BYTES, "max_manifest_bytes",
                                 inside=path.parent)  # never a link out of its folder
    except FileNotFoundError:
        return {}
    except Exception as e:  # noqa: BLE001 - the catalog is optional: say so, read on
        warnings.append(f"{path.name}: not read ({e}); column types from the manifest only")
        return {}
    try:
        catalog = json.loads(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        warnings.append(f"{path.name}: not read (not valid JSON: {e}); column types from "
                        "the manifest only")
        return {}
    out: dict[str, dict[str, str]] = {}
    for section in ("nodes", "sources"):
        entries = catalog.get(section) if isinstance(catalog, dict) else None
        for uid, entry in (entries.items() if isinstance(entries, dict) else ()):
            columns = entry.get("columns") if isinstance(entry, dict) else None
            if not isinstance(columns, dict):
                continue
            ordered = sorted((c for c in columns.values() if isinstance(c, dict)),
                             key=_index)
            out[uid] = {str(c.get("name")).lower(): _str(c.get("type")) for c in ordered
                        if c.get("name")}
            out[f"{uid}#names"] = {str(c.get("name")).lower(): str(c.get("name"))
                                   for c in ordered if c.get("name")}
    return out
