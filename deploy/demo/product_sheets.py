"""Templated product fact sheets: the bulk of the demo's SQuAD v2 questions.

The hand-written manuals give 89 answerable training questions, too few for a
tiny model to learn extractive QA (every variant learnt only to abstain, issue
18 defect 12). Each sheet here describes one made-up product in 5 of the 13
attributes below, in shuffled order, with one filler sentence; it asks one
question per stated attribute (answerable, the span is the value) and three
about attributes it does not state (unanswerable). Sheets are split by
product, so dev/test products, sentences and values are new combinations the
model has not seen.

Standard library only; deterministic for a seed (string-seeded random.Random).
"""
import random

BRANDS = ["Nordvik", "Kestrel", "Orbita", "Halden", "Solano", "Brightwell", "Tamsin", "Corvel",
          "Lindqvist", "Marisol", "Oberon", "Pellucid", "Rendell", "Sable", "Tovana", "Ulmer",
          "Vesper", "Wexford", "Yarrow", "Zephyra", "Aldane", "Birchmont", "Calder", "Dunmore"]
TYPES = ["kettle", "blender", "desk lamp", "smart speaker", "robot vacuum", "electric toothbrush",
         "hair dryer", "air fryer", "e-reader", "fitness tracker", "portable heater", "webcam",
         "label printer", "baby monitor", "rice cooker", "power bank", "hand mixer", "bike light",
         "sewing machine", "dehumidifier", "electric shaver", "projector", "soundbar", "drone"]
COLOURS = ["matte black", "white", "silver", "sage green", "navy blue", "graphite", "sand beige",
           "coral red", "slate grey", "ivory"]
CITIES = ["Porto", "Leeds", "Gdańsk", "Malmö", "Austin", "Graz", "Cork", "Lyon", "Denver", "Brno",
          "Tampere", "Osaka", "Monterrey", "Bilbao", "Pune", "Tartu"]
FIRST = ["Ana", "Ben", "Chloé", "David", "Emma", "Farid", "Grace", "Hiro", "Ines", "Jonas", "Kofi",
         "Lena", "Mateo", "Nadia", "Oskar", "Priya"]
LAST = ["Smith", "García", "Okafor", "Müller", "Nguyen", "Rossi", "Kowalski", "Tanaka", "Haddad",
        "Larsen", "Moreau", "Silva"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December"]
NUMBER_WORDS = ["two", "three", "four", "five"]


def _weight(rng):
    if rng.random() < 0.5:
        return f"{rng.randint(2, 48) / 10:g} kg"
    return f"{rng.randrange(150, 990, 10)} grams"


def _warranty(rng):
    return rng.choice([f"{rng.choice(NUMBER_WORDS)} years", f"{rng.choice([6, 18, 24, 30, 36])} months"])


def _price(rng):
    symbol = rng.choice(["$", "€", "£"])
    whole = rng.randint(19, 499)
    return f"{symbol}{whole}" if rng.random() < 0.6 else f"{symbol}{whole}.99"


def _colours(rng):
    a, b = rng.sample(COLOURS, 2)
    return a if rng.random() < 0.4 else f"{a} and {b}"


def _released(rng):
    year = rng.randint(2019, 2026)
    return str(year) if rng.random() < 0.5 else f"{rng.choice(MONTHS)} {year}"


def _dimensions(rng):
    x, y, z = sorted((rng.randint(4, 60) for _ in range(3)), reverse=True)
    return f"{x} x {y} x {z} cm"


# attribute -> (value maker, statements, questions). "{v}" is the value (the
# answer span), "{n}" the product's name, "{b}" its brand.
ATTRIBUTES = {
    "weight": (_weight,
               ["It weighs {v}.", "The {n} weighs {v}.", "With a weight of {v}, it is easy to carry."],
               ["How much does the {n} weigh?", "What is the weight of the {n}?", "How heavy is the {n}?"]),
    "battery": (lambda r: f"{r.randint(3, 40)} hours",
                ["A full battery lasts {v}.", "The battery runs for up to {v} on a single charge.",
                 "Battery life is rated at {v}."],
                ["How long does the battery of the {n} last?", "What is the battery life of the {n}?",
                 "How long does the {n} run on one charge?"]),
    "charging": (lambda r: r.choice([f"{r.randrange(30, 180, 15)} minutes", f"{r.randint(2, 6)} hours"]),
                 ["Charging from empty takes {v}.", "It recharges fully in {v}.",
                  "A complete charge takes about {v}."],
                 ["How long does the {n} take to charge?", "How long does it take to fully charge the {n}?",
                  "What is the charging time of the {n}?"]),
    "warranty": (_warranty,
                 ["The warranty covers {v}.", "{b} guarantees the {n} for {v}.",
                  "It is covered by a warranty of {v}."],
                 ["How long is the warranty on the {n}?", "For how long is the {n} guaranteed?",
                  "What warranty period does the {n} have?"]),
    "price": (_price,
              ["It sells for {v}.", "The recommended retail price is {v}.", "The {n} costs {v}."],
              ["How much does the {n} cost?", "What is the price of the {n}?", "What does the {n} sell for?"]),
    "colours": (_colours,
                ["It is available in {v}.", "The {n} comes in {v}.", "Colour options are {v}."],
                ["What colours does the {n} come in?", "Which colours is the {n} available in?",
                 "In what colour can I buy the {n}?"]),
    "origin": (lambda r: r.choice(CITIES),
               ["It is made in {v}.", "The {n} is assembled in {v}.", "{b} builds it at its factory in {v}."],
               ["Where is the {n} made?", "Where is the {n} assembled?", "In which city is the {n} manufactured?"]),
    "power": (lambda r: f"{r.choice([5, 9, 12, 18, 25, 40, 65, 120, 300, 850, 1200, 2000])} W",
              ["It draws {v} at full power.", "Power consumption is {v}.", "The {n} is rated at {v}."],
              ["How much power does the {n} use?", "What is the power consumption of the {n}?",
               "How many watts does the {n} draw?"]),
    "water": (lambda r: r.choice(["IPX4", "IPX5", "IPX7", "IP54", "IP65", "IP67", "IP68"]),
              ["It is rated {v} against water and dust.", "The housing meets {v}.",
               "Its water resistance rating is {v}."],
              ["What is the water resistance rating of the {n}?", "What IP rating does the {n} have?",
               "How water resistant is the {n}?"]),
    "released": (_released,
                 ["It went on sale in {v}.", "{b} launched the {n} in {v}.", "The {n} was released in {v}."],
                 ["When was the {n} released?", "When did the {n} go on sale?", "When was the {n} launched?"]),
    "designer": (lambda r: f"{r.choice(FIRST)} {r.choice(LAST)}",
                 ["It was designed by {v}.", "{v} led the design of the {n}.", "The {n} is the work of designer {v}."],
                 ["Who designed the {n}?", "Who is the designer of the {n}?", "Who led the design of the {n}?"]),
    "support": (lambda r: f"help@{r.choice(['care', 'support', 'service'])}.{r.choice(BRANDS).lower()}.example",
                ["Support is reachable at {v}.", "For help, write to {v}.", "Questions about it go to {v}."],
                ["What is the support email for the {n}?", "Where do I write for help with the {n}?",
                 "Which address answers questions about the {n}?"]),
    "dimensions": (_dimensions,
                   ["It measures {v}.", "The {n} is {v} in size.", "Its dimensions are {v}."],
                   ["What are the dimensions of the {n}?", "How big is the {n}?", "What size is the {n}?"]),
}
FILLERS = ["The box also holds a quick start guide.", "A companion app adds schedules and updates.",
           "Reviewers praised how quiet it is.", "The packaging is made from recycled cardboard.",
           "Spare parts are sold separately.", "It pairs with most phones in seconds.",
           "A travel pouch is included.", "Firmware updates arrive over the air."]
STATED = 5
UNANSWERABLE = 3
# Sheets per split (train / dev / test): about 1,600 answerable training questions.
SHEETS = {"train": 320, "dev": 40, "test": 50}


def _product_names(rng, count, taken=()):
    names = set(taken)
    out = []
    while len(out) < count:
        model = f"{rng.choice('ABCDEFGHKLMNPRSTVXZ')}{rng.randint(1, 99)}"
        if rng.random() < 0.2:
            model += rng.choice([" Pro", " Mini", " Plus", " Max"])
        brand = rng.choice(BRANDS)
        name = f"{brand} {model}"
        if name in names:
            continue
        names.add(name)
        out.append((brand, name, rng.choice(TYPES)))
    return out


def make_sheet(rng, brand, name, kind, sentences_out=None):
    """(context, [(attribute, question, value, start)], [(attribute, question)]).
    With sentences_out (a list), also appends the sheet's sentences to it as
    (attribute or None, text); the draws from rng are the same either way."""
    attrs = sorted(ATTRIBUTES)
    stated = rng.sample(attrs, STATED)
    absent = rng.sample([a for a in attrs if a not in stated], UNANSWERABLE)
    article = "an" if kind[0] in "aeiou" else "a"
    sentences = [(None, f"The {name} is {article} {kind} from {brand}.", None)]
    for attr in stated:
        maker, statements, _ = ATTRIBUTES[attr]
        value = maker(rng)
        sentences.append((attr, rng.choice(statements), value))
    body = sentences[1:] + [(None, rng.choice(FILLERS), None)]
    rng.shuffle(body)
    context = ""
    answers = []
    for attr, template, value in [sentences[0]] + body:
        if context:
            context += " "
        if attr is None:
            context += template
            if sentences_out is not None:
                sentences_out.append((None, template))
            continue
        # Fill {n}/{b} first, then find where {v} lands (code-point offset).
        text = template.replace("{n}", name).replace("{b}", brand)
        start = len(context) + text.index("{v}")
        text = text.replace("{v}", value)
        context += text
        answers.append((attr, value, start))
        if sentences_out is not None:
            sentences_out.append((attr, text))
    qa = []
    for attr, value, start in answers:
        question = rng.choice(ATTRIBUTES[attr][2]).replace("{n}", name)
        qa.append((attr, question, value, start))
    na = [(attr, rng.choice(ATTRIBUTES[attr][2]).replace("{n}", name)) for attr in absent]
    return context, qa, na


def make_sheets(seed):
    """split -> SQuAD v2 articles (one per brand, in first-seen order)."""
    rng = random.Random(f"{seed}/product-sheets")
    total = sum(SHEETS.values())
    products = _product_names(rng, total)
    out = {}
    offset = 0
    for split in ("train", "dev", "test"):
        articles = {}
        for k, (brand, name, kind) in enumerate(products[offset:offset + SHEETS[split]]):
            context, qa, na = make_sheet(rng, brand, name, kind)
            slug = name.lower().replace(" ", "-")
            qas = [{"id": f"sheet-{slug}-{attr}", "question": q,
                    "answers": [{"text": value, "answer_start": start}], "is_impossible": False}
                   for attr, q, value, start in qa]
            qas += [{"id": f"sheet-{slug}-na-{attr}", "question": q, "answers": [], "is_impossible": True}
                    for attr, q in na]
            rng.shuffle(qas)
            for item in qas:
                for a in item["answers"]:
                    assert context[a["answer_start"]:a["answer_start"] + len(a["text"])] == a["text"], item["id"]
            articles.setdefault(brand, []).append({"context": context, "qas": qas})
        offset += SHEETS[split]
        out[split] = [{"title": f"{brand} product sheets", "paragraphs": paras} for brand, paras in articles.items()]
    return out


def make_sheet_rerank(sheets, seed, queries_per_sheet=2, n_hard=3, n_easy=2):
    """split -> rerank groups from the sheets: a sheet's answerable question
    as the query, the sheet itself (label 1), 3 sheets of the same split that
    state the same attribute (hard: the attribute's words are there, the
    product is not) and 2 other sheets of the split (easy), shuffled."""
    rng = random.Random(f"{seed}/sheet-rerank")
    out = {}
    for split, articles in sheets.items():
        paras = [p for art in articles for p in art["paragraphs"]]
        stated = [{qa["id"].rsplit("-", 1)[1] for qa in p["qas"] if not qa["is_impossible"]} for p in paras]
        groups = []
        for i, p in enumerate(paras):
            asked = [qa for qa in p["qas"] if not qa["is_impossible"]][:queries_per_sheet]
            for qa in asked:
                attr = qa["id"].rsplit("-", 1)[1]
                same = [j for j in range(len(paras)) if j != i and attr in stated[j]]
                hard = rng.sample(same, min(n_hard, len(same)))
                rest = [j for j in range(len(paras)) if j != i and j not in hard]
                easy = rng.sample(rest, n_easy)
                group = [{"query": qa["question"], "passage": p["context"], "label": 1}]
                group += [{"query": qa["question"], "passage": paras[j]["context"], "label": 0} for j in hard + easy]
                rng.shuffle(group)
                groups.append(group)
        out[split] = groups
    return out


def make_rerank_training_sheets(sheets, seed, count=1200, queries_per_sheet=3, n_hard=3, n_easy=2):
    """Extra rerank training groups on sheets of their own (new products, in
    no other file): a reranker has to learn to match the query's product name
    against the passage's, and the 320 training sheets give only 640 queries
    to learn that from (deploy/demo/README.md, "Why the reranker did not
    learn"). Of each group's hard negatives (sheets stating the asked
    attribute), one is a sheet of the same brand where there is one, so the
    model number matters too. The dev and test groups stay as they are."""
    rng = random.Random(f"{seed}/rerank-training-sheets")
    products = _product_names(rng, count, taken=_sheet_names(sheets))
    made = []
    for brand, name, kind in products:
        context, qa, _ = make_sheet(rng, brand, name, kind)
        made.append((brand, context, {attr: q for attr, q, _, _ in qa}))
    groups = []
    for i, (brand, context, asked) in enumerate(made):
        for attr in rng.sample(sorted(asked), min(queries_per_sheet, len(asked))):
            same = [j for j in range(len(made)) if j != i and attr in made[j][2]]
            same_brand = [j for j in same if made[j][0] == brand]
            hard = rng.sample(same_brand, 1) if same_brand else []
            hard += rng.sample([j for j in same if j not in hard], n_hard - len(hard))
            easy = rng.sample([j for j in range(len(made)) if j != i and j not in hard], n_easy)
            group = [{"query": asked[attr], "passage": context, "label": 1}]
            group += [{"query": asked[attr], "passage": made[j][1], "label": 0} for j in hard + easy]
            rng.shuffle(group)
            groups.append(group)
    return groups


def make_sentence_rerank_groups(sheets, seed, other_groups, count=300, queries_per_sheet=5):
    """Rerank training groups within one sheet (new products, in no other
    file): a question about the product, the sentence that answers it (label
    1) and five other sentences of the same sheet. Every candidate belongs to
    the asked product, and the intro sentence and many statements name it,
    so the name decides nothing: the model has to match what is asked with
    what a sentence states, which is what the manual queries need
    (deploy/demo/README.md, sixth round). No product is one of the sheets'
    or of other_groups' passages (the training sheets of their own), so no
    query repeats another group's."""
    rng = random.Random(f"{seed}/rerank-sentences")
    taken = {sheet_name(r["passage"]) for g in other_groups for r in g} | _sheet_names(sheets)
    products = _product_names(rng, count, taken=taken)
    groups = []
    for brand, name, kind in products:
        sentences = []
        _, qa, _ = make_sheet(rng, brand, name, kind, sentences_out=sentences)
        for attr, question, _, _ in rng.sample(qa, min(queries_per_sheet, len(qa))):
            positive = next(text for a, text in sentences if a == attr)
            group = [{"query": question, "passage": positive, "label": 1}]
            others = [text for a, text in sentences if a != attr]
            group += [{"query": question, "passage": text, "label": 0} for text in rng.sample(others, 5)]
            rng.shuffle(group)
            groups.append(group)
    return groups


def sheet_name(context):
    """The product a sheet is about (each sheet opens "The NAME is a ...")."""
    return context.split(" is a", 1)[0][len("The "):]


def _sheet_names(sheets):
    """The product names of the sheets."""
    return {sheet_name(para["context"]) for articles in sheets.values() for art in articles
            for para in art["paragraphs"]}
