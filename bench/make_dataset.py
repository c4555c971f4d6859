"""Generate the benchmark dataset deterministically from templates (no network, no model).

Writes ``bench/data/dataset.json``: 50 RAG samples in RAGAS v0.2 column names (``user_input``,
``retrieved_contexts``, ``response``, ``reference``, ``reference_contexts``,
``retrieved_context_ids``, ``reference_context_ids``) plus ``language``. Each sample has five
retrieved contexts of about 600 characters: three about the sample's (fictional) topic and two
distractors about other topics, in a shuffled order, so the precision and recall metrics have
something to tell apart. About a third of the samples are in Japanese.

Usage: ``python bench/make_dataset.py [--out PATH] [--samples N]``. The output only depends on
the arguments (a fixed seed), so re-running it reproduces the shipped file byte for byte.
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass
from pathlib import Path

SEED = 20240605
DEFAULT_OUT = Path(__file__).resolve().parent / "data" / "dataset.json"
TARGET_CHARS = {"en": (560, 660), "ja": (560, 660)}
JA_EVERY = (2, 5, 8)  # sample index % 10 in this set -> Japanese (15 of 50)

# --------------------------------------------------------------------------- vocabulary

EN_SYLLABLES = ["Vel", "mor", "Kest", "ari", "Dun", "lo", "Bran", "esk", "Tor", "vin", "Ald", "ra"]
EN_KINDS = ["Bridge", "Observatory", "Library", "Museum", "Railway", "Lighthouse", "Market"]
EN_FEATURES = [
    "copper roof",
    "stone arches",
    "glass dome",
    "clock tower",
    "carved doors",
    "iron spiral stair",
]
EN_REGIONS = ["Northmere", "Saltcombe", "Eastvale", "Highfold", "Greyhaven", "Linmoor"]
EN_COUNTRIES = ["Norland", "Estovia", "Calder", "Marisca"]
EN_FIRST = ["Ada", "Henrik", "Mira", "Tomas", "Lena", "Oskar", "Ines", "Pavel"]
EN_LAST = ["Quell", "Barrow", "Ostrand", "Fenwick", "Halloran", "Vey", "Castell", "Rook"]
EN_FILLERS = [
    "Local guides often describe the area as calm in the early morning.",
    "The surrounding streets are lined with small shops, bakeries and cafes.",
    "Visitors are advised to bring a light jacket, as the wind can be strong.",
    "Several walking routes start from the square in front of the main entrance.",
    "The town council publishes a seasonal guide with opening hours and events.",
    "Photography is allowed in most public areas, but not during private events.",
    "A regional bus connects the site with the central station twice an hour.",
    "School groups are common on weekdays, especially in spring and autumn.",
    "The nearby river is popular with anglers and, in summer, with kayakers.",
    "Accessibility has improved since ramps and a lift were added to the entrance.",
    "Many residents remember the site from family outings in their childhood.",
    "A small shop near the exit sells postcards, maps and local honey.",
]

JA_PLACES = ["北原", "白川", "青葉", "桜台", "高森", "水無瀬", "若葉", "朝霧", "花園", "東雲"]
JA_KINDS = ["橋", "天文台", "図書館", "博物館", "鉄道", "灯台", "市場"]
JA_FEATURES = [
    "銅板の屋根",
    "石造りのアーチ",
    "ガラスのドーム",
    "時計塔",
    "彫刻の扉",
    "鉄の螺旋階段",
]
JA_REGIONS = ["北湖地方", "塩浜地方", "東谷地方", "高原地方", "灰港地方", "林野地方"]
JA_FIRST = ["健一", "美和", "翔太", "由紀", "誠", "恵子", "大輔", "佳奈"]
JA_LAST = ["佐倉", "宮前", "藤森", "川島", "早瀬", "片桐", "水野", "城戸"]
JA_FILLERS = [
    "地元の案内人は、早朝のこの辺りをとても静かな場所だと話す。",
    "周辺の通りには小さな商店やパン屋、喫茶店が並んでいる。",
    "風が強い日が多いので、上着を持って行くことが勧められている。",
    "正面入口前の広場からは、いくつかの散策路が延びている。",
    "町役場は開館時間や催しをまとめた季節ごとの案内を発行している。",
    "ほとんどの公共の場所で写真撮影が許されているが、貸切の催しの間は禁止される。",
    "中央駅との間には一時間に二本の路線バスが運行している。",
    "平日、とくに春と秋には学校の団体見学が多い。",
    "近くの川は釣り人に人気があり、夏にはカヤックを楽しむ人も多い。",
    "入口に傾斜路と昇降機が設けられてから、利用しやすさが大きく向上した。",
    "多くの住民は、子どもの頃の家族の外出でこの場所を覚えている。",
    "出口近くの売店では、絵はがきや地図、地元産の蜂蜜が売られている。",
    "週末には地元の楽団による小さな演奏会が開かれることもある。",
    "雨の日でも見学できるように、屋根付きの通路が整備されている。",
    "秋になると、周囲の並木が色づき、多くの写真愛好家が集まってくる。",
    "館内の案内板は日本語と英語で書かれており、初めての人にも分かりやすい。",
    "冬の間は開館時間が一時間短くなるので、事前に確認したほうがよい。",
    "駐車場は小さいため、休日には公共交通機関を使うことが勧められている。",
    "近所の食堂では、この地方の名物である川魚の料理を味わうことができる。",
    "ボランティアの案内係が、毎週土曜日の午後に無料の解説を行っている。",
]


@dataclass(frozen=True)
class Topic:
    """A fictional landmark with the facts the contexts, reference and answer talk about."""

    name: str
    kind: str
    city: str
    region: str
    country: str
    person: str
    year: int
    restored: int
    visitors: int
    length: int
    feature: str
    society: str


def _en_name(rng: random.Random) -> str:
    return (rng.choice(EN_SYLLABLES) + rng.choice(EN_SYLLABLES).lower()).capitalize()


def make_topic(rng: random.Random, language: str) -> Topic:
    """Draw one fictional topic in the given language."""
    year = rng.randrange(1850, 1960)
    if language == "ja":
        place = rng.choice(JA_PLACES)
        return Topic(
            name=place + rng.choice(["第一", "中央", "新", "旧", "南"]),
            kind=rng.choice(JA_KINDS),
            city=rng.choice(JA_PLACES) + "町",
            region=rng.choice(JA_REGIONS),
            country="日本",
            person=rng.choice(JA_LAST) + rng.choice(JA_FIRST),
            year=year,
            restored=year + rng.randrange(30, 60),
            visitors=rng.randrange(20, 400) * 1000,
            length=rng.randrange(40, 900),
            feature=rng.choice(JA_FEATURES),
            society=rng.choice(JA_PLACES) + "技術協会",
        )
    return Topic(
        name=_en_name(rng),
        kind=rng.choice(EN_KINDS),
        city=_en_name(rng) + rng.choice(["ton", "by", "field", "mouth"]),
        region=rng.choice(EN_REGIONS),
        country=rng.choice(EN_COUNTRIES),
        person=f"{rng.choice(EN_FIRST)} {rng.choice(EN_LAST)}",
        year=year,
        restored=year + rng.randrange(30, 60),
        visitors=rng.randrange(20, 400) * 1000,
        length=rng.randrange(40, 900),
        feature=rng.choice(EN_FEATURES),
        society=f"{_en_name(rng)} Society of Engineers",
    )


# --------------------------------------------------------------------------- sentences


def facts(t: Topic, language: str) -> list[list[str]]:
    """Fact sentences of a topic, grouped by the context they belong to (three groups)."""
    if language == "ja":
        full = f"{t.name}{t.kind}"
        return [
            [
                f"{full}は{t.region}の{t.city}にある。",
                f"{full}は技師の{t.person}が設計し、{t.year}年に開かれた。",
                f"本館の長さは端から端まで{t.length}メートルある。",
            ],
            [
                f"毎年およそ{t.visitors:,}人が{full}の{t.feature}を見に訪れる。",
                f"{t.restored}年、洪水で{t.feature}が傷んだあと、{full}は修復された。",
            ],
            [
                f"{t.person}はその後、{t.city}で{t.society}を設立した。",
                f"{t.society}は今も若い技師のための講座を開いている。",
            ],
        ]
    full = f"the {t.name} {t.kind}"
    return [
        [
            f"{full[0].upper()}{full[1:]} stands in {t.city}, a town in the {t.region} region "
            f"of {t.country}.",
            f"It was designed by the engineer {t.person} and opened in {t.year}.",
            f"Its main hall measures {t.length} metres from end to end.",
        ],
        [
            f"Each year about {t.visitors:,} visitors come to see the {t.feature} of {full}.",
            f"In {t.restored}, {full} was restored after a flood damaged its {t.feature}.",
        ],
        [
            f"{t.person} later founded the {t.society} in {t.city}.",
            f"The {t.society} still runs courses for young engineers.",
        ],
    ]


def paragraph(core: list[str], language: str, rng: random.Random) -> str:
    """Pad fact sentences with filler sentences until the paragraph is about 600 characters."""
    fillers = list(JA_FILLERS if language == "ja" else EN_FILLERS)
    rng.shuffle(fillers)
    sep = "" if language == "ja" else " "
    low, high = TARGET_CHARS[language]
    sentences = list(core)
    for filler in fillers:
        if len(sep.join(sentences)) >= low:
            break
        if len(sep.join([*sentences, filler])) > high:
            continue
        sentences.insert(rng.randrange(1, len(sentences) + 1), filler)
    return sep.join(sentences)


def question_reference_answer(t: Topic, language: str, rng: random.Random) -> tuple[str, str, str]:
    """A question about the topic, its reference answer and a generated (imperfect) answer."""
    style = rng.randrange(3)
    wrong_year = t.year + rng.choice([-3, 2, 5])
    if language == "ja":
        full = f"{t.name}{t.kind}"
        if style == 0:
            q = f"{full}はいつ開かれ、誰が設計しましたか？"
            ref = (
                f"{full}は技師の{t.person}が設計し、{t.year}年に開かれた。"
                f"{t.person}はのちに{t.society}を設立した。"
            )
            ans = f"{full}は{t.person}の設計で、{wrong_year}年に開かれました。"
        elif style == 1:
            q = f"{full}はどこにあり、毎年何人が訪れますか？"
            ref = f"{full}は{t.region}の{t.city}にある。毎年およそ{t.visitors:,}人が訪れる。"
            ans = f"{full}は{t.city}にあり、毎年およそ{t.visitors:,}人が訪れます。"
        else:
            q = f"{full}の{t.feature}には何が起きましたか？"
            ref = (
                f"{t.restored}年の洪水で{full}の{t.feature}が傷み、その後修復された。"
                f"{full}は{t.year}年に開かれた。"
            )
            ans = f"{full}の{t.feature}は洪水で傷み、修復されました。"
        return q, ref, ans
    full = f"the {t.name} {t.kind}"
    if style == 0:
        q = f"When did {full} open, and who designed it?"
        ref = (
            f"{full[0].upper()}{full[1:]} was designed by the engineer {t.person} and opened in "
            f"{t.year}. {t.person} later founded the {t.society}."
        )
        ans = f"{full[0].upper()}{full[1:]} opened in {wrong_year} and was designed by {t.person}."
    elif style == 1:
        q = f"Where is {full}, and how many people visit it each year?"
        ref = (
            f"{full[0].upper()}{full[1:]} is in {t.city}, in the {t.region} region of "
            f"{t.country}. About {t.visitors:,} people visit it each year."
        )
        ans = f"It is in {t.city} and gets roughly {t.visitors:,} visitors a year."
    else:
        q = f"What happened to the {t.feature} of {full}?"
        ref = (
            f"A flood damaged the {t.feature} of {full}, which was restored in {t.restored}. "
            f"{full[0].upper()}{full[1:]} had opened in {t.year}."
        )
        ans = f"The {t.feature} was damaged by a flood and later restored."
    return q, ref, ans


# --------------------------------------------------------------------------- samples


def build(samples: int = 50, seed: int = SEED) -> list[dict[str, object]]:
    """Build ``samples`` records; the same arguments always give the same records."""
    rng = random.Random(seed)
    languages = ["ja" if i % 10 in JA_EVERY else "en" for i in range(samples)]
    topics = [make_topic(rng, lang) for lang in languages]
    records: list[dict[str, object]] = []
    for i, (topic, lang) in enumerate(zip(topics, languages, strict=True)):
        groups = facts(topic, lang)
        own = [(f"t{i:02d}-{part}", paragraph(g, lang, rng)) for part, g in enumerate(groups)]
        others = [j for j in range(samples) if j != i and languages[j] == lang]
        if len(others) < 2:  # tiny datasets: borrow distractors from the other language
            others = [j for j in range(samples) if j != i]
        distractors = []
        for j in rng.sample(others, 2):
            part = rng.randrange(3)
            distractors.append(
                (f"t{j:02d}-{part}", paragraph(facts(topics[j], lang)[part], lang, rng))
            )
        retrieved = own + distractors
        rng.shuffle(retrieved)
        question, reference, answer = question_reference_answer(topic, lang, rng)
        # The reference contexts carry the same facts with other filler sentences, so the
        # string-similarity metrics see near (not exact) matches.
        reference_contexts = [paragraph(groups[k], lang, rng) for k in (0, 1)]
        records.append(
            {
                "user_input": question,
                "retrieved_contexts": [text for _, text in retrieved],
                "retrieved_context_ids": [doc_id for doc_id, _ in retrieved],
                "response": answer,
                "reference": reference,
                "reference_contexts": reference_contexts,
                "reference_context_ids": [own[0][0], own[1][0]],
                "language": lang,
            }
        )
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output JSON file")
    parser.add_argument("--samples", type=int, default=50, help="number of samples")
    args = parser.parse_args(argv)
    records = build(args.samples)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(records, ensure_ascii=False, indent=1) + "\n"
    args.out.write_text(text, encoding="utf-8")
    sizes = sorted(len(c) for r in records for c in r["retrieved_contexts"])  # type: ignore[attr-defined]
    print(
        f"wrote {len(records)} samples to {args.out} (context length min {sizes[0]}, "
        f"median {sizes[len(sizes) // 2]}, max {sizes[-1]})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
