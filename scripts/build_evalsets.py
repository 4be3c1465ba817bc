"""Rebuild the judge-evaluation sets shipped in src/llmgw/cli/evalsets/ from their sources.

    python scripts/build_evalsets.py XSTEST_CSV SST_CSV ARTIFACTS_GIT_DIR JBB_BENIGN_CSV

XSTEST_CSV is `xstest_prompts.csv` of paul-rottger/exaggerated-safety, SST_CSV is
`SimpleSafetyTests - test cases.csv` of bertiev/SimpleSafetyTests, ARTIFACTS_GIT_DIR a clone of
JailbreakBench/artifacts (its git directory), JBB_BENIGN_CSV the benign split of JBB-Behaviors.
It writes each set's JSONL and rewrites the counts and hashes in `sets.json`; the commits and the
rest of each note are kept as they are (edit them by hand when a source moves on).
"""

from __future__ import annotations

import csv
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent.parent / "src" / "llmgw" / "cli" / "evalsets"
PAIR = "attack-artifacts/PAIR/black_box/vicuna-13b-v1.5.json"


def rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def artifact(git_dir: Path, path: str) -> dict[str, Any]:
    shown = subprocess.run(["git", "--git-dir", str(git_dir), "show", f"HEAD:{path}"],
                           capture_output=True, check=True, text=True).stdout
    return dict(json.loads(shown))


def case(text: str, label: str, category: str, source_id: str) -> dict[str, str]:
    return {"text": text.strip(), "label": label, "direction": "input", "category": category,
            "id": source_id}


def build(xstest: Path, sst: Path, artifacts: Path, benign: Path) -> dict[str, list[dict[str, str]]]:
    harmful = artifact(artifacts, "attack-artifacts/PAIR/black_box/llama-2-7b-chat-hf.json")["jailbreaks"]
    pair = artifact(artifacts, PAIR)["jailbreaks"]
    return {
        "xstest": [case(r["prompt"], r["label"], r["type"], f"xstest-{r['id']}") for r in rows(xstest)],
        "sst": [case(r["prompts_final"], "unsafe", r["harm_area"], r["id"]) for r in rows(sst)],
        "jbb": [case(j["goal"], "unsafe", j["category"], f"jbb-harmful-{j['index']}") for j in harmful]
        + [case(r["goal"], "safe", r["category"], f"jbb-benign-{r['index']}") for r in rows(benign)],
        # The prompts PAIR found that JailbreakBench's judge ruled had jailbroken Vicuna 13B.
        "jbb-pair": [case(j["prompt"], "unsafe", j["category"], f"jbb-pair-vicuna-{j['index']}")
                     for j in pair if j["jailbroken"] and j["prompt"]],
    }


def main(argv: list[str]) -> None:
    sets = build(*(Path(a) for a in argv))
    notes_path = OUT / "sets.json"
    notes = json.loads(notes_path.read_text(encoding="utf-8"))
    for name, cases in sets.items():
        data = "".join(json.dumps(c, ensure_ascii=False) + "\n" for c in cases).encode()
        (OUT / f"{name}.jsonl").write_bytes(data)
        notes[name].update(cases=len(cases), safe=sum(c["label"] == "safe" for c in cases),
                           unsafe=sum(c["label"] == "unsafe" for c in cases),
                           sha256=hashlib.sha256(data).hexdigest())
    notes_path.write_text(json.dumps(notes, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1:])
