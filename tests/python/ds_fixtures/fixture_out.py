"""fixture_out.py — how the DeepSpeed fixture writers (make_*.py, run by hand, never by CI) write
their record: {"deepspeed": version, "cases": {name: record}} as sorted, indented JSON."""
import json


def write(path, version, cases):
    with open(path, "w") as f:
        json.dump({"deepspeed": version, "cases": cases}, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {path}: {len(cases)} cases, DeepSpeed {version}")
