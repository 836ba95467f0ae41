#!/usr/bin/python3
"""Deterministic demo data for dserve: support tickets, product manuals,
SQuAD v2 questions and rerank pairs (DESIGN.md section 4 formats).

Usage (Debian's /usr/bin/python3, standard library only):
    generate_demo_data.py --out DIR [--seed 13] [--scale 1.0]

The same --seed and --scale always give byte-identical files (no clocks, no
set iteration, string-seeded random.Random streams); another seed gives other
tickets, other splits and other question orders. --scale multiplies the number
of support tickets (2400/300/300 at 1.0); the manuals and their questions are a
fixed, hand-written corpus whose train/dev/test assignment depends on the seed.

Files written into DIR:
  tickets_{train,dev,test}.jsonl   classify: {"text", "label", "tags": [...]}
        11 intents. Tags mark slices worth scoring separately:
          negation       a negated intent word ("I do NOT want a refund, I want a
                         replacement" -> replacement_request), plus negations
                         that do not flip the intent ("still haven't received
                         my refund" -> refund_request);
          swapped_roles  minimal pairs where who did what to whom decides the
                         label ("I sent the X back to you ... where is my money"
                         -> refund_request / "You sent the X to me ... where is
                         my package" -> shipping_delay);
          word_order     minimal pairs with the same words in another order
                         ("a refund, not a replacement" / "a replacement, not a
                         refund");
          noisy          typos or casing noise (about 7% of all tickets).
        Both members of a pair land in the same split. Untagged tickets have
        "tags": []. No text (compared case- and whitespace-insensitively)
        occurs twice anywhere.
  manuals.txt      six made-up product manuals; one document per manual (title
                   line, then one paragraph per line), blank line between them.
  qa_{train,dev,test}.json   SQuAD v2: data[].paragraphs[].{context, qas[].{id,
        question, answers[].{text, answer_start}, is_impossible}}. Answers are
        marked in the manual source as [[key|text]], so every answer_start
        (a code-point offset) comes from construction and is re-checked.
        Unanswerable questions ask for a fact the paragraph does not state
        (>= 30% of all questions). Split by paragraph: per manual one paragraph
        goes to test, one to dev, the rest to train. Then templated product
        sheets (product_sheets.py; 320/40/50, split by product), one article
        per brand: 5 stated attributes each asked once, 3 unstated ones asked
        as unanswerable questions, so a tiny model has ~1,700 answerable
        training questions to learn from (the manuals alone give 89).
  rerank_{train,dev,test}.jsonl   {"query", "passage", "label"}: one group of
        contiguous lines per query (an answerable question): its paragraph
        (label 1), 3 other paragraphs of the same manual (hard negatives) and 2
        paragraphs of other manuals (easy negatives), in shuffled order. The
        split follows the positive paragraph's split. Plus two answerable
        questions per product sheet (product_sheets.make_sheet_rerank): the
        sheet, 3 sheets stating the asked attribute, 2 other sheets, all of
        the query's split. Groups in shuffled order.
  mlm_train.txt, mlm_dev.txt   masked-LM corpus (blank lines separate
        documents): the manual paragraphs of the QA train (dev) split, one
        document per manual, the product sheets of that split, one document
        per brand, then the train (dev) tickets, one per document.
        Test paragraphs and test tickets are in neither.
  mlm_train_pairs.txt   mlm_train.txt, then each rerank training query
        and its relevant passage as a two-line document (the demo MLM's
        corpus; the tokenizer trains on mlm_train.txt).
  stats.json       counts per split, intents, tags, unanswerable fractions.
"""
import argparse
import json
import os
import random
import re
import sys

from product_sheets import (SHEETS, make_rerank_training_sheets, make_sentence_rerank_groups, make_sheet_rerank,
                            make_sheets)

INTENTS = [
    "billing_dispute", "refund_request", "replacement_request", "password_reset",
    "shipping_delay", "cancel_subscription", "change_address", "technical_issue",
    "account_deletion", "upgrade_plan", "other",
]
HARD_TAGS = ["negation", "swapped_roles", "word_order"]
ALL_TAGS = HARD_TAGS + ["noisy"]
BASE_SPLIT_SIZES = {"train": 2400, "dev": 300, "test": 300}
SPLITS = ["train", "dev", "test"]
# Share of all tickets per hard tag (pairs count as two tickets).
HARD_SHARE = {"negation": 0.07, "swapped_roles": 0.06, "word_order": 0.06}
NOISE_RATE = 0.07

# --------------------------------------------------------------------------
# Slot fillers
# --------------------------------------------------------------------------
PRODUCTS = [
    "Aeris R7 router", "BrewMaster 300", "BrewMaster 300 coffee machine", "ThermaLink T2",
    "ThermaLink T2 thermostat", "LumaCam D4 doorbell", "LumaCam D4", "PureAir P5 purifier",
    "PureAir P5", "VoltRide S2 scooter", "VoltRide S2", "wireless earbuds", "smart plug",
    "laptop stand", "phone case", "mesh extender", "milk frother", "desk lamp",
]
PARTS = ["power adapter", "charging cable", "drip tray", "wall plate", "filter", "remote",
         "mounting bracket", "water tank", "battery pack", "lid"]
PLANS = ["Plus", "Pro", "Premium", "Family", "Business", "Unlimited"]
APPS = ["Aeris Home", "BrewMaster", "ThermaLink", "LumaCam", "PureAir", "VoltRide", "mobile"]
CARRIERS = ["DHL", "UPS", "FedEx", "the courier", "Royal Mail", "DPD", "the post office"]
NAMES = ["Ana", "Ben", "Chloé", "David", "Emma", "Farid", "Grace", "Hiro", "Ines", "Jonas",
         "Kemal", "Lena", "Marco", "Nadia", "Olu", "Priya", "Quinn", "Rosa", "Sven", "Tomás",
         "Uma", "Viktor", "Wen", "Yusuf", "Zoë"]
SURNAMES = ["Smith", "García", "Okafor", "Müller", "Nguyen", "Rossi", "Kowalski", "Tanaka",
            "Dubois", "Silva", "Novak", "Hansen"]
CITIES = ["Leeds", "Lyon", "Porto", "Austin", "Gdańsk", "Malmö", "Denver", "Cork", "Graz",
          "Toronto", "Utrecht", "Bilbao", "Osaka", "Perth"]
STREETS = ["Oak Street", "Station Road", "Maple Avenue", "Harbour Lane", "Mill Road",
           "Kingsway", "Elm Close", "Rue Victor Hugo", "Hauptstraße", "Canal Street"]
COUNTRIES = ["Canada", "Norway", "Brazil", "Japan", "Ireland", "Mexico", "Poland", "Iceland"]
PLATFORMS = ["Android 12", "iOS 17", "Alexa", "Google Home", "Apple HomeKit", "Windows 11"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
DOMAINS = ["example.com", "mail.test", "inbox.example", "post.example.org"]
ERROR_CODES = ["E-104", "E17", "ERR_42", "0x80070005", "E-3", "code 502", "F21", "E4"]

OPENERS = ["", "", "", "", "Hi,", "Hello,", "Hi there,", "Hey,", "Good morning,", "Dear support,",
           "Hello team,", "Hi support.", "Urgent:", "Quick question:"]
CLOSERS = ["", "", "", "", "Thanks.", "Thank you!", "Thanks, {name}", "Regards, {name}",
           "Please help.", "This is urgent.", "Cheers", "Best, {name} {surname}",
           "Thanks in advance.", "Any update would be appreciated."]


def _money(rng):
    cur = rng.choice(["$", "$", "€", "£"])
    whole = rng.choice([9, 12, 15, 19, 24, 29, 39, 49, 59, 79, 99, 119, 149, 199, 249])
    cents = rng.choice(["", ".99", ".00", ".50", ".95"])
    return f"{cur}{whole}{cents}"


def _date(rng):
    """A date that reads well after "on" or "since"."""
    m = rng.choice(MONTHS)
    d = rng.randint(1, 28)
    form = rng.randrange(5)
    if form == 0:
        return f"{m} {d}"
    if form == 1:
        return f"{d} {m}"
    if form == 2:
        return f"{rng.randint(1, 12):02d}/{d:02d}"
    if form == 3:
        return rng.choice(WEEKDAYS)
    suffix = "st" if d in (1, 21) else "nd" if d in (2, 22) else "rd" if d in (3, 23) else "th"
    return f"the {d}{suffix}"


def _order(rng):
    n = rng.randint(100000, 999999)
    return rng.choice([f"#{n}", f"{n}", f"ORD-{n}", f"A{n}"])


def _address(rng):
    return f"{rng.randint(1, 240)} {rng.choice(STREETS)}, {rng.choice(CITIES)}"


def fill_slots(rng):
    """One value per slot; a template uses the ones it names."""
    name = rng.choice(NAMES)
    a1 = _money(rng)
    a2 = _money(rng)
    while a2 == a1:
        a2 = _money(rng)
    return {
        "product": rng.choice(PRODUCTS), "part": rng.choice(PARTS), "plan": rng.choice(PLANS),
        "app": rng.choice(APPS), "carrier": rng.choice(CARRIERS), "name": name,
        "surname": rng.choice(SURNAMES), "city": rng.choice(CITIES), "country": rng.choice(COUNTRIES),
        "platform": rng.choice(PLATFORMS), "month": rng.choice(MONTHS), "date": _date(rng),
        "order": _order(rng), "amount": a1, "amount2": a2, "address": _address(rng),
        "days": str(rng.randint(3, 21)), "code": rng.choice(ERROR_CODES),
        "zip": f"{rng.randint(10000, 99999)}",
        "email": f"{name.lower().replace('é', 'e').replace('ë', 'e').replace('á', 'a')}"
                 f"{rng.randint(1, 99)}@{rng.choice(DOMAINS)}",
    }


# --------------------------------------------------------------------------
# Ticket templates
# --------------------------------------------------------------------------
TEMPLATES = {
    "billing_dispute": [
        "I was charged twice for order {order} on {date}. Please fix this.",
        "There is a charge of {amount} on my card from {date} that I don't recognise.",
        "My invoice for {month} shows {amount} but my {plan} plan should cost {amount2}.",
        "Why was I billed {amount} after my free trial ended? Nobody told me it would renew.",
        "You billed me {amount} for a {product} I never ordered.",
        "The total on order {order} is wrong, I was charged {amount} instead of {amount2}.",
        "I see two payments of {amount} on my bank statement for the same {plan} subscription.",
        "The promo code was accepted at checkout but the discount never showed up on my bill for order {order}.",
        "I got a late fee of {amount} even though I paid on {date}.",
        "Can someone explain the {amount} 'service fee' on my last statement?",
        "Your system billed my old card and my new card for the same month.",
        "I'm being billed for the {plan} plan but my account still shows Basic.",
    ],
    "refund_request": [
        "I returned the {product} on {date} and would like my refund of {amount}.",
        "Please refund order {order}, the {product} was not what I expected.",
        "How long does it take to get my money back for order {order}? I sent it back {days} days ago.",
        "I'd like a full refund for the {product}. It arrived damaged and I don't want another one.",
        "Can I get my {amount} back? I cancelled order {order} before it shipped.",
        "I want to return the {product} and get a refund to my original payment method.",
        "The refund for order {order} still isn't on my card.",
        "I was promised a refund of {amount} on {date}. When will it be paid?",
        "Please send me a return label for the {product} so I can get my money back.",
        "The {product} stopped working after two days. I just want my money back, please.",
        "Is it too late to return order {order} for a refund? I bought it on {date}.",
    ],
    "replacement_request": [
        "The {product} arrived with a cracked case. Please send a replacement.",
        "My {product} is faulty; I'd like to exchange it for a new one.",
        "I received the wrong colour of the {product} in order {order}, please swap it for the black one.",
        "The {part} was missing from order {order}; please send one.",
        "My {product} is under warranty and stopped working. I need a replacement unit.",
        "The {part} of my {product} broke after a week, can you send a new one?",
        "Please exchange the {product} from order {order}; it was damaged in shipping.",
        "I'd like a replacement {part} for my {product}, the original one cracked.",
        "The {product} I got is a different model than the one I ordered. Please send the right one.",
        "Send me a working {product} please, this one was dead on arrival.",
    ],
    "password_reset": [
        "I forgot my password and can't log in.",
        "The password reset email never arrives at {email}.",
        "I'm locked out of my account after too many login attempts.",
        "The reset link says it has expired. Can you send a new one?",
        "How do I change my password? I think someone else knows it.",
        "I can't sign in to the {app} app, it keeps saying my password is incorrect.",
        "I reset my password on {date} but the new one doesn't work either.",
        "My account is locked and the code sent to my phone is not accepted.",
        "Please help me get back into my account, I no longer have access to {email}.",
        "Need a password reset for the account under {email}.",
        "The 'forgot password' button does nothing when I click it.",
    ],
    "shipping_delay": [
        "My order {order} was supposed to arrive on {date} and it still isn't here.",
        "Where is my package? The tracking for order {order} hasn't updated in {days} days.",
        "It's been {days} days since I ordered the {product} and it has not shipped yet.",
        "{carrier} says my parcel is delayed. When will order {order} arrive?",
        "The tracking number for order {order} doesn't work on the {carrier} website.",
        "My {product} was marked as delivered but I never received it.",
        "Order {order} has been 'in transit' since {date}. Is it lost?",
        "I paid for express shipping and the {product} is already {days} days late.",
        "Can you tell me when my order will arrive? I need the {product} before {date}.",
        "The delivery estimate keeps moving; first it was {date}, now it says next week.",
    ],
    "cancel_subscription": [
        "Please cancel my {plan} subscription.",
        "I want to stop my monthly plan before the next payment on {date}.",
        "How do I cancel my subscription? I can't find the option in the {app} app.",
        "Cancel my membership effective immediately, I'm not using it anymore.",
        "I'd like to end my {plan} plan at the end of this billing period.",
        "Please turn off auto-renewal and cancel my subscription.",
        "I'm moving abroad and need to cancel the {plan} subscription for my {product}.",
        "I want to unsubscribe from the {plan} plan, please stop the monthly payments.",
        "I signed up for the free trial and want to cancel before it becomes a paid plan.",
        "Can you confirm that my subscription is cancelled? I asked for it on {date}.",
    ],
    "change_address": [
        "I moved. Please update my address to {address}.",
        "Can I change the delivery address for order {order}? It should go to {address}.",
        "The shipping address on my account is out of date, the new one is {address}.",
        "Please send order {order} to my office instead: {address}.",
        "I need to update my billing address, I now live in {city}.",
        "I made a typo in the street name for order {order}. The correct address is {address}.",
        "Please change the address on my account before my next delivery on {date}.",
        "How do I edit my saved address? I moved to {city} last month.",
        "Could you redirect the {product} to {address}? I won't be home.",
        "Update my postal code to {zip} please, the old one was wrong.",
    ],
    "technical_issue": [
        "My {product} keeps disconnecting from Wi-Fi every few minutes.",
        "The {app} app crashes as soon as I open it.",
        "I get error {code} when I try to pair the {product}.",
        "The {product} won't turn on even after charging it overnight.",
        "Since the update on {date} the {product} is really slow.",
        "The screen on my {product} is frozen and the buttons do nothing.",
        "The {product} shows error {code} and makes a clicking noise.",
        "I can't connect the {product} to the {app} app, it says device not found.",
        "The {product} restarts by itself several times a day.",
        "Notifications from the {app} app stopped working after I updated my phone.",
        "The firmware update for the {product} failed halfway with error {code}.",
    ],
    "account_deletion": [
        "Please delete my account and all my personal data.",
        "I want to close my account permanently. My email is {email}.",
        "How do I delete my profile? I don't want you to keep my information.",
        "Under GDPR I request erasure of all data linked to {email}.",
        "Remove my account, I will not be using your service again.",
        "Please permanently delete the account I created on {date}.",
        "I want my account and order history erased.",
        "Close my account and confirm when my data has been deleted.",
        "Can you delete the duplicate account I made with {email}?",
        "I no longer want an account with you, please wipe everything.",
    ],
    "upgrade_plan": [
        "I'd like to upgrade from Basic to {plan}.",
        "How much does it cost to move to the {plan} plan?",
        "Please switch my subscription to {plan}, I need more devices.",
        "Can I upgrade to {plan} in the middle of my billing cycle?",
        "I want the {plan} plan for my {product}. How do I upgrade?",
        "We need more users on our account, please upgrade us to {plan}.",
        "Is there a discount if I upgrade to the annual {plan} plan?",
        "Upgrade my account to {plan} starting {date}.",
        "What extra features do I get if I upgrade to {plan}?",
        "My storage is full, I want a bigger plan.",
    ],
    "other": [
        "What are your customer service hours?",
        "Do you ship to {country}?",
        "I just wanted to say the {product} works great, thanks!",
        "Is the {product} compatible with {platform}?",
        "Do you have a store in {city} where I can see the {product}?",
        "Can I get a copy of the user manual for the {product}?",
        "Are you hiring? I'd like to apply for a job in {city}.",
        "Which colours does the {product} come in?",
        "Do you sell gift cards?",
        "How do I leave a review for the {product}?",
        "Is there a student discount?",
        "Does the {product} work with {platform}?",
    ],
}
# Slight imbalance, as in real queues.
INTENT_WEIGHTS = {
    "billing_dispute": 1.1, "refund_request": 1.2, "replacement_request": 0.9,
    "password_reset": 1.1, "shipping_delay": 1.3, "cancel_subscription": 1.0,
    "change_address": 0.8, "technical_issue": 1.3, "account_deletion": 0.7,
    "upgrade_plan": 0.8, "other": 0.8,
}

# negation: (template, label). The first block flips: the negated intent word
# is not the label. The second block keeps the intent despite the negation.
NEGATION = [
    ("I do NOT want a refund for order {order}, I want a replacement {product}.", "replacement_request"),
    ("I'm not asking for my money back. Please just send a {product} that works.", "replacement_request"),
    ("I don't want to cancel my subscription, I want to upgrade to {plan}.", "upgrade_plan"),
    ("Please do not delete my account, I only need to reset my password.", "password_reset"),
    ("Don't close my account! I just can't log in since {date}.", "password_reset"),
    ("This is not a billing question: my {product} shows error {code} every morning.", "technical_issue"),
    ("I don't need a new password, I need my package. Order {order} is {days} days late.", "shipping_delay"),
    ("No, I don't want to upgrade. Cancel my {plan} subscription at the end of the month.", "cancel_subscription"),
    ("Do not cancel order {order}, just ship it to {address} instead.", "change_address"),
    ("I do not want a replacement, I want my {amount} back for order {order}.", "refund_request"),
    ("The {product} isn't broken, I simply want my account and data deleted.", "account_deletion"),
    ("I'm not locked out and my password works; the {app} app crashes when I open settings.", "technical_issue"),
    ("Please don't refund me, I'd rather switch to the {plan} plan.", "upgrade_plan"),
    ("I never moved and don't want my address changed, but you charged me {amount} twice on {date}.", "billing_dispute"),
    ("Not a shipping problem: the {product} arrived on time, but the invoice says {amount} instead of {amount2}.", "billing_dispute"),
    ("I don't want my account deleted, just the old address {address} removed and replaced with my new one in {city}.", "change_address"),
    # non-flipping
    ("I still haven't received my refund of {amount} for order {order}.", "refund_request"),
    ("My package has not arrived and it's been {days} days.", "shipping_delay"),
    ("I can't log in and the reset email never came.", "password_reset"),
    ("I don't want this subscription anymore, please cancel it.", "cancel_subscription"),
    ("The {product} does not turn on, no lights, nothing.", "technical_issue"),
    ("I didn't authorise the {amount} charge on {date}.", "billing_dispute"),
    ("I no longer want you to keep any of my data; delete the account.", "account_deletion"),
]

# swapped_roles minimal pairs: who did what to whom decides the label.
SWAPPED_ROLES = [
    (("I sent the {product} back to you on {date}; where is my money?", "refund_request"),
     ("You sent the {product} to me on {date}; where is my package?", "shipping_delay")),
    (("You say I owe you {amount} for the {product}, but I already paid.", "billing_dispute"),
     ("You owe me {amount} for the {product} I sent back.", "refund_request")),
    (("I want to move my account up to the {plan} plan.", "upgrade_plan"),
     ("You moved my account up to the {plan} plan without asking and billed me {amount}.", "billing_dispute")),
    (("I want you to close my account for good and erase my data.", "account_deletion"),
     ("You closed my account and now I can't get back in, please help me log in.", "password_reset")),
    (("You cancelled my order {order} and still charged me {amount}.", "billing_dispute"),
     ("I cancelled my order {order}; please give me back the {amount}.", "refund_request")),
    (("I gave you the wrong address for order {order}; it should go to {address}.", "change_address"),
     ("You gave the courier the wrong address for order {order} and now it is {days} days late.", "shipping_delay")),
    (("You returned my broken {product} to me unrepaired; please send a working one.", "replacement_request"),
     ("I returned the broken {product} to you; please send my refund.", "refund_request")),
]

# word_order minimal pairs: the same words, another order, another label.
WORD_ORDER = [
    (("I want a refund, not a replacement, for the {product} from order {order}.", "refund_request"),
     ("I want a replacement, not a refund, for the {product} from order {order}.", "replacement_request")),
    (("I'd rather cancel than upgrade my {plan} plan.", "cancel_subscription"),
     ("I'd rather upgrade than cancel my {plan} plan.", "upgrade_plan")),
    (("The charge is fine but the address on order {order} is wrong.", "change_address"),
     ("The address is fine but the charge on order {order} is wrong.", "billing_dispute")),
    (("My password works but the {app} app does not.", "technical_issue"),
     ("The {app} app works but my password does not.", "password_reset")),
    (("Replace the {product}, don't refund it.", "replacement_request"),
     ("Refund the {product}, don't replace it.", "refund_request")),
    (("Keep my account, delete the {plan} subscription.", "cancel_subscription"),
     ("Keep the {plan} subscription, delete my account.", "account_deletion")),
]


def dress(rng, body, slots):
    """Adds an optional greeting and sign-off around a filled template."""
    opener = rng.choice(OPENERS)
    closer = rng.choice(CLOSERS).format(**slots)
    if opener == "Urgent:" and closer == "This is urgent.":
        closer = ""
    # "Hi, my order..." as often as "Hi, My order..." ("I", "ORD-1" stay).
    if opener.endswith(",") and len(body) > 1 and body[1].islower() and rng.random() < 0.5:
        body = body[0].lower() + body[1:]
    parts = [p for p in (opener, body, closer) if p]
    return " ".join(parts)


def _typo(rng, word):
    if len(word) < 4 or not word.isalpha():
        return word
    i = rng.randrange(1, len(word) - 1)
    kind = rng.randrange(3)
    if kind == 0:  # swap
        return word[:i] + word[i + 1] + word[i] + word[i + 2:]
    if kind == 1:  # drop
        return word[:i] + word[i + 1:]
    return word[:i] + word[i] + word[i:]  # double


def add_noise(rng, text):
    kind = rng.randrange(4)
    if kind == 0:
        return text.lower()
    if kind == 1:
        return text.lower().rstrip(".!?")
    words = text.split(" ")
    for _ in range(rng.randint(1, 2)):
        j = rng.randrange(len(words))
        words[j] = _typo(rng, words[j])
    out = " ".join(words)
    if kind == 3:
        out = out.upper() if len(out) < 60 else out[0].lower() + out[1:]
    return out


def norm_key(text):
    return " ".join(text.lower().split())


def render(rng, template, slots, noisy):
    text = dress(rng, template.format(**slots), slots)
    tags = []
    if noisy:
        noised = add_noise(rng, text)
        if noised != text:
            text = noised
            tags.append("noisy")
    return text, tags


def make_tickets(seed, scale):
    rng = random.Random(f"{seed}/tickets")
    sizes = {s: max(1, round(n * scale)) for s, n in BASE_SPLIT_SIZES.items()}
    total = sum(sizes.values())
    seen = {}

    def unique(text):
        k = norm_key(text)
        if k in seen:
            return False
        seen[k] = True
        return True

    # Hard cases first (groups of 1 or 2 tickets), then normal ones.
    groups = {tag: [] for tag in HARD_TAGS}
    for tag in HARD_TAGS:
        want = max(3, round(total * HARD_SHARE[tag]))
        attempts = 0
        count = 0
        while count < want and attempts < want * 50:
            attempts += 1
            slots = fill_slots(rng)
            noisy = rng.random() < NOISE_RATE
            if tag == "negation":
                template, label = rng.choice(NEGATION)
                text, extra = render(rng, template, slots, noisy)
                if not unique(text):
                    continue
                groups[tag].append([{"text": text, "label": label, "tags": [tag] + extra}])
                count += 1
            else:
                pair = rng.choice(SWAPPED_ROLES if tag == "swapped_roles" else WORD_ORDER)
                # Same greeting, sign-off and slots for both members.
                state = rng.getstate()
                members = []
                for template, label in pair:
                    rng.setstate(state)
                    text, extra = render(rng, template, slots, noisy)
                    members.append({"text": text, "label": label, "tags": [tag] + extra})
                if norm_key(members[0]["text"]) in seen or norm_key(members[1]["text"]) in seen:
                    continue
                if members[0]["tags"] != members[1]["tags"]:
                    continue  # noise changed only one member; keep pairs alike
                unique(members[0]["text"])
                unique(members[1]["text"])
                groups[tag].append(members)
                count += 2

    n_hard = sum(len(m) for tag in HARD_TAGS for m in groups[tag])
    n_normal = total - n_hard
    intents = list(INTENT_WEIGHTS)
    weights = [INTENT_WEIGHTS[i] for i in intents]
    normal = {i: [] for i in intents}
    made = 0
    attempts = 0
    while made < n_normal and attempts < n_normal * 50:
        attempts += 1
        intent = rng.choices(intents, weights)[0]
        slots = fill_slots(rng)
        text, tags = render(rng, rng.choice(TEMPLATES[intent]), slots, rng.random() < NOISE_RATE)
        if not unique(text):
            continue
        normal[intent].append({"text": text, "label": intent, "tags": tags})
        made += 1
    if made < n_normal:
        raise SystemExit(f"could only make {made} of {n_normal} distinct normal tickets; lower --scale")

    # Split: hard groups per tag in proportion (at least one group per split),
    # then normal tickets stratified by intent to fill each split exactly.
    out = {s: [] for s in SPLITS}
    frac = {s: sizes[s] / total for s in SPLITS}
    for tag in HARD_TAGS:
        g = groups[tag]
        rng.shuffle(g)
        n_test = max(1, round(len(g) * frac["test"]))
        n_dev = max(1, round(len(g) * frac["dev"]))
        for i, members in enumerate(g):
            split = "test" if i < n_test else "dev" if i < n_test + n_dev else "train"
            out[split].extend(members)
    need = {s: sizes[s] - len(out[s]) for s in SPLITS}
    if min(need.values()) < 0:
        raise SystemExit("--scale too small for the hard-case quotas")
    # Largest-remainder quotas per intent for dev and test; the rest is train.
    quota = {}
    for s in ("test", "dev"):
        raw = {i: need[s] * len(normal[i]) / n_normal for i in intents}
        q = {i: int(raw[i]) for i in intents}
        rest = need[s] - sum(q.values())
        for i in sorted(intents, key=lambda i: (-(raw[i] - q[i]), i))[:rest]:
            q[i] += 1
        quota[s] = q
    for i in intents:
        items = normal[i]
        rng.shuffle(items)
        a = quota["test"][i]
        b = a + quota["dev"][i]
        out["test"].extend(items[:a])
        out["dev"].extend(items[a:b])
        out["train"].extend(items[b:])
    for s in SPLITS:
        rng.shuffle(out[s])
        assert len(out[s]) == sizes[s], (s, len(out[s]), sizes[s])
    return out


# --------------------------------------------------------------------------
# Manuals. [[key|text]] marks an answer span; "qa" maps keys to question
# phrasings; "na" holds questions about the paragraph's topic whose answer the
# paragraph does not contain.
# --------------------------------------------------------------------------
MANUALS = [
    {"slug": "aeris-r7", "title": "Aeris R7 Wi-Fi Router: User Manual", "paragraphs": [
        {"text": "The Aeris R7 is a dual-band Wi-Fi 6 router for homes and small offices. It broadcasts on the 2.4 GHz and 5 GHz bands at the same time and covers up to [[cov|250 square metres]]. On the back panel you will find [[lan|four Gigabit LAN ports]], one yellow WAN port and a [[usb|USB 3.0 port]] for sharing a printer or a drive. The router supports up to [[dev|64 connected devices]].",
         "qa": {"cov": ["How large an area does the Aeris R7 cover?", "What is the coverage of the Aeris R7 router?"],
                "lan": ["How many LAN ports does the Aeris R7 have?", "Which wired ports for devices are on the back of the R7?"],
                "usb": ["What kind of USB port does the Aeris R7 have?"],
                "dev": ["How many devices can connect to the Aeris R7?", "What is the maximum number of connected devices on the R7?"]},
         "na": ["What is the price of the Aeris R7?", "How many antennas does the Aeris R7 have?",
                "What is the top speed of the Aeris R7 on the 5 GHz band?", "Which colour is the LAN port on the Aeris R7?"]},
        {"text": "To set up the Aeris R7, connect your modem to the yellow WAN port with the supplied cable and plug in the 12 V power adapter. Wait until the status light turns solid white, which takes about [[boot|two minutes]]. Then open a browser and go to [[addr|192.168.8.1]], or use the [[app|Aeris Home app]]. The default admin password is printed on [[label|the label on the underside of the router]]; you will be asked to change it on first login.",
         "qa": {"boot": ["How long does the Aeris R7 take to start up?", "How long until the status light of the R7 turns solid white?"],
                "addr": ["What address do I open in a browser to set up the Aeris R7?", "What is the setup address of the R7 router?"],
                "app": ["Which app can be used to set up the Aeris R7?"],
                "label": ["Where can I find the default admin password for the R7?", "Where is the default password of the Aeris R7 printed?"]},
         "na": ["What is the default Wi-Fi network name of the Aeris R7?", "How long is the supplied cable?",
                "What is the default admin username of the Aeris R7?"]},
        {"text": "The status light on the front of the Aeris R7 shows the state of the connection. Solid white means the router is online. [[amber|Blinking amber]] means the router has power but no internet connection; check the modem and the WAN cable. [[red|Solid red]] indicates a hardware fault and should be reported to support. A [[blue|pulsing blue]] light means WPS pairing is active for [[wps|120 seconds]].",
         "qa": {"amber": ["What does the light look like when the Aeris R7 has no internet connection?", "Which light pattern shows the router has power but no internet?"],
                "red": ["Which light indicates a hardware fault on the R7?"],
                "blue": ["What light shows that WPS pairing is active on the Aeris R7?"],
                "wps": ["How long does WPS pairing stay active?", "For how many seconds is WPS pairing active on the Aeris R7?"]},
         "na": ["What does a blinking white light mean on the Aeris R7?", "How do I turn off the status light?",
                "What does a solid green light mean on the R7?"]},
        {"text": "If the Aeris R7 stops responding, first restart it by unplugging the power adapter for [[unplug|30 seconds]]. If that does not help, perform a factory reset: press and hold the recessed RESET button with [[clip|a paperclip]] for [[hold|10 seconds]] until the light flashes red twice. A factory reset erases all settings, including the Wi-Fi name and password, and restores the default admin password. The router checks for firmware updates every night at [[fw|3:00 a.m.]]",
         "qa": {"unplug": ["How long should I unplug the Aeris R7 to restart it?"],
                "clip": ["What do I use to press the RESET button on the R7?"],
                "hold": ["How long must the RESET button be held for a factory reset?", "For how many seconds do I hold RESET to factory reset the Aeris R7?"],
                "fw": ["When does the Aeris R7 check for firmware updates?"]},
         "na": ["How long does a factory reset of the Aeris R7 take to complete?", "How do I back up the router settings before a reset?",
                "What is the latest firmware version for the Aeris R7?"]},
        {"text": "The Aeris R7 comes with a [[warr|two-year limited warranty]] from the date of purchase. The warranty does not cover damage caused by lightning or by using a power adapter other than the original [[psu|12 V, 1.5 A adapter]]. The router weighs [[wt|480 grams]] and measures 22 by 15 by 4 centimetres. To make a claim, contact support with the serial number, which starts with [[sn|the letters AR7]].",
         "qa": {"warr": ["How long is the warranty on the Aeris R7?", "What warranty comes with the R7 router?"],
                "psu": ["Which power adapter does the Aeris R7 use?"],
                "wt": ["How much does the Aeris R7 weigh?"],
                "sn": ["What does the serial number of the Aeris R7 start with?"]},
         "na": ["How much does an extended warranty for the Aeris R7 cost?", "What is the phone number for warranty claims?",
                "How long does a warranty repair of the R7 take?"]},
    ]},
    {"slug": "brewmaster-300", "title": "BrewMaster 300 Coffee Machine: User Manual", "paragraphs": [
        {"text": "The BrewMaster 300 is a bean-to-cup coffee machine with a [[pump|15-bar pump]] and a built-in conical grinder. The removable water tank holds [[tank|1.8 litres]] and the bean hopper holds [[hopper|250 grams]] of beans. The machine heats up in about [[heat|25 seconds]] and switches itself off after [[auto|30 minutes]] without use.",
         "qa": {"pump": ["What pump does the BrewMaster 300 have?", "How many bar is the pump in the BrewMaster 300?"],
                "tank": ["How much water does the BrewMaster 300 tank hold?", "What is the water tank capacity of the BrewMaster?"],
                "hopper": ["How many beans fit in the BrewMaster 300 hopper?"],
                "heat": ["How long does the BrewMaster 300 take to heat up?"],
                "auto": ["When does the BrewMaster 300 switch itself off?", "After how long without use does the BrewMaster turn off?"]},
         "na": ["How much electricity does the BrewMaster 300 use?", "What colours is the BrewMaster 300 sold in?",
                "How many grind settings does the BrewMaster 300 have?", "How loud is the grinder of the BrewMaster 300?"]},
        {"text": "Before the first use, rinse the water tank and fill it up to the MAX mark with fresh cold water. Place a large cup under the spout and run [[rinse|two cycles of hot water]] to flush the system. Do not put [[ground|ground coffee]] into the bean hopper, because it clogs the grinder. The first [[discard|three cups]] may taste weak and can be discarded.",
         "qa": {"rinse": ["What should I run before the first use of the BrewMaster 300?", "How do I flush the BrewMaster before first use?"],
                "ground": ["What should not be put into the bean hopper?", "What clogs the grinder of the BrewMaster 300?"],
                "discard": ["How many of the first cups may taste weak?"]},
         "na": ["What temperature should the water be for the first rinse?", "How long does the first rinse take?",
                "Which coffee beans are recommended for the BrewMaster 300?"]},
        {"text": "Turn the strength dial from [[dial|1 to 5]] to choose how much coffee is ground for each cup. Press the small cup button for an espresso of [[esp|40 ml]] or the large cup button for a lungo of [[lungo|110 ml]]. To make two cups at once, press the cup button [[twice|twice within one second]]. The milk frother on the right side heats milk to about [[milk|65 °C]].",
         "qa": {"dial": ["What range does the strength dial of the BrewMaster 300 cover?"],
                "esp": ["How much coffee is in an espresso from the BrewMaster 300?", "What is the espresso volume of the small cup button?"],
                "lungo": ["How large is a lungo from the BrewMaster?"],
                "twice": ["How do I make two cups at once on the BrewMaster 300?"],
                "milk": ["How hot does the BrewMaster 300 milk frother get the milk?", "To what temperature does the frother heat milk?"]},
         "na": ["Can the BrewMaster 300 make hot chocolate?", "How do I program a custom cup size?",
                "What is the maximum cup height under the spout?"]},
        {"text": "Descale the BrewMaster 300 every [[every|200 cups]] or as soon as the DESCALE light turns [[orange|orange]]. Pour [[sol|500 ml]] of descaling solution into the empty tank and hold the hot water button for [[hotbtn|five seconds]] to start the program. The descaling program takes about [[dur|20 minutes]] and must not be interrupted.",
         "qa": {"every": ["How often should the BrewMaster 300 be descaled?"],
                "orange": ["What colour does the DESCALE light turn when descaling is needed?"],
                "sol": ["How much descaling solution do I pour into the tank?", "What amount of descaling solution does the BrewMaster need?"],
                "hotbtn": ["How long do I hold the hot water button to start descaling?"],
                "dur": ["How long does the descaling program take?", "How many minutes does descaling the BrewMaster 300 take?"]},
         "na": ["Which brand of descaling solution should I use?", "What happens if the descaling program is interrupted?",
                "How much does a bottle of descaling solution cost?"]},
        {"text": "Empty the drip tray and the grounds container every day; both parts are [[dish|dishwasher safe]]. Remove the brew unit from the side door and rinse it under lukewarm water [[weekly|once a week]], without soap. The BrewMaster 300 has a [[warr|one-year warranty]], which is void if the machine was descaled with [[vinegar|vinegar]].",
         "qa": {"dish": ["Can the drip tray of the BrewMaster 300 go in the dishwasher?"],
                "weekly": ["How often should the brew unit be rinsed?"],
                "warr": ["How long is the warranty on the BrewMaster 300?", "What warranty does the BrewMaster coffee machine have?"],
                "vinegar": ["What voids the warranty of the BrewMaster 300 when used for descaling?"]},
         "na": ["Where can I buy a replacement brew unit?", "How long does the grounds container last before it is full?",
                "Is the water tank dishwasher safe?"]},
    ]},
    {"slug": "thermalink-t2", "title": "ThermaLink T2 Smart Thermostat: Installation and Use", "paragraphs": [
        {"text": "The ThermaLink T2 works with most [[volt|24 V]] heating and cooling systems. It needs a common wire (C-wire) for continuous power; without one, it runs on [[batt|two AA batteries]] that last about [[battlife|one year]]. The round display shows the room temperature in large digits and turns off after [[disp|10 seconds]] to save power.",
         "qa": {"volt": ["What voltage systems does the ThermaLink T2 work with?"],
                "batt": ["What batteries does the ThermaLink T2 use without a C-wire?", "Which batteries power the T2 when there is no common wire?"],
                "battlife": ["How long do the batteries of the ThermaLink T2 last?"],
                "disp": ["When does the display of the ThermaLink T2 turn off?"]},
         "na": ["Does the ThermaLink T2 work with 230 V electric heaters?", "What is the screen size of the ThermaLink T2?",
                "How accurate is the temperature sensor of the T2?"]},
        {"text": "Before installing the ThermaLink T2, switch off the heating system at the [[breaker|circuit breaker]]. Take a photo of the old wiring and label each wire with the stickers in the box. Mount the wall plate with the [[screws|two supplied screws]], making sure the arrow points [[arrow|up]]. Connect the red wire to the terminal marked [[rh|Rh]] and the white wire to [[w1|W1]].",
         "qa": {"breaker": ["Where do I switch off the heating before installing the ThermaLink T2?"],
                "screws": ["What do I mount the ThermaLink T2 wall plate with?"],
                "arrow": ["Which way should the arrow on the wall plate point?"],
                "rh": ["Which terminal does the red wire connect to?", "Where does the red wire go on the ThermaLink T2?"],
                "w1": ["Which terminal is the white wire connected to?"]},
         "na": ["Which terminal does the green wire connect to?", "How high on the wall should the ThermaLink T2 be mounted?",
                "How long does the installation of the T2 take?"]},
        {"text": "The ThermaLink T2 lets you set up to [[periods|six periods per day]], each with its own temperature. Eco mode lowers the target to [[eco|17 °C]] by default. When everyone has left home, the app switches to Away mode after [[away|two hours]]. Changes made on the dial override the schedule until [[override|the next period starts]].",
         "qa": {"periods": ["How many schedule periods per day does the ThermaLink T2 support?"],
                "eco": ["What temperature does Eco mode use by default?", "What is the default Eco mode target on the T2?"],
                "away": ["When does the ThermaLink app switch to Away mode?"],
                "override": ["How long does a change on the dial override the schedule?"]},
         "na": ["What temperature does Away mode use?", "Can the ThermaLink T2 learn my schedule automatically?",
                "How many different schedules can be saved?"]},
        {"text": "An optional remote sensor measures the temperature in another room and sends it to the ThermaLink T2 over a range of up to [[range|15 metres]]. Each thermostat accepts up to [[sensors|four remote sensors]]. The sensor runs on a [[coin|CR2032 coin cell]] that lasts about [[senslife|two years]].",
         "qa": {"range": ["What is the range of the ThermaLink remote sensor?", "How far can the remote sensor be from the T2?"],
                "sensors": ["How many remote sensors can one ThermaLink T2 use?"],
                "coin": ["What battery does the remote sensor use?"],
                "senslife": ["How long does the remote sensor battery last?"]},
         "na": ["How much does a remote sensor cost?", "Does the remote sensor measure humidity?",
                "How often does the remote sensor send a reading?"]},
        {"text": "If the ThermaLink T2 shows error [[e1|E1]], there is no power on the C-wire; check the breaker and the wiring. Error [[e4|E4]] means a remote sensor has not reported for one hour. To restart the thermostat, press and hold the dial for [[restart|15 seconds]]. Support for the T2 is available every day from [[hours|8 a.m. to 8 p.m.]]",
         "qa": {"e1": ["Which error does the ThermaLink T2 show when there is no power on the C-wire?"],
                "e4": ["Which error means a remote sensor stopped reporting?"],
                "restart": ["How long do I hold the dial to restart the ThermaLink T2?", "How do I restart the T2 thermostat?"],
                "hours": ["When is ThermaLink support available?"]},
         "na": ["What does error E2 mean on the ThermaLink T2?", "How do I factory reset the ThermaLink T2?",
                "What is the support phone number for the T2?"]},
    ]},
    {"slug": "lumacam-d4", "title": "LumaCam D4 Video Doorbell: Quick Guide", "paragraphs": [
        {"text": "The LumaCam D4 records video in [[res|1080p]] with a [[fov|160-degree]] field of view, so you can see a visitor from head to toe. Infrared night vision reaches up to [[night|5 metres]]. The doorbell has a two-way speaker and a [[chime|built-in chime]] that plays inside the house when the button is pressed.",
         "qa": {"res": ["What resolution does the LumaCam D4 record in?"],
                "fov": ["What is the field of view of the LumaCam D4?", "How wide is the view of the LumaCam doorbell?"],
                "night": ["How far does the LumaCam D4 night vision reach?"],
                "chime": ["What plays inside the house when the LumaCam D4 button is pressed?"]},
         "na": ["Does the LumaCam D4 record audio in stereo?", "What is the frame rate of the LumaCam D4?",
                "How many chime tunes does the LumaCam D4 have?"]},
        {"text": "Mount the LumaCam D4 about [[height|1.2 metres]] above the ground. If your door frame is angled away from the path, use the [[wedge|wedge kit]] to turn the camera by 15 degrees. The doorbell can be wired to an existing bell transformer of [[trans|16 to 24 V AC]] or run on its battery alone.",
         "qa": {"height": ["How high should the LumaCam D4 be mounted?", "At what height above the ground should the D4 go?"],
                "wedge": ["What do I use if the door frame is angled away from the path?"],
                "trans": ["What bell transformer voltage can the LumaCam D4 be wired to?"]},
         "na": ["What tools do I need to mount the LumaCam D4?", "Can the LumaCam D4 be mounted on brick?",
                "How long are the mounting screws?"]},
        {"text": "The removable battery of the LumaCam D4 has a capacity of [[cap|6000 mAh]] and lasts about [[life|three months]] with 20 events a day. A full charge over USB-C takes about [[charge|five hours]]. The light ring glows [[green|green]] when charging is complete.",
         "qa": {"cap": ["What is the battery capacity of the LumaCam D4?"],
                "life": ["How long does the LumaCam D4 battery last?", "How many months does a charge of the D4 battery last?"],
                "charge": ["How long does it take to charge the LumaCam D4 battery?"],
                "green": ["What colour does the light ring glow when charging is complete?"]},
         "na": ["How much does a spare LumaCam battery cost?", "Does the LumaCam D4 support solar charging?",
                "How long does the battery last in cold weather?"]},
        {"text": "In the LumaCam app you can draw up to [[zones|four motion zones]] and set the sensitivity from [[sens|1 to 10]]. Cars passing on the street can be ignored by lowering the sensitivity or by shrinking the zones. Motion alerts pause for [[snooze|one hour]] after you tap Snooze.",
         "qa": {"zones": ["How many motion zones can I draw in the LumaCam app?"],
                "sens": ["What is the range of the motion sensitivity setting?"],
                "snooze": ["How long do motion alerts pause after tapping Snooze?", "How long does Snooze silence LumaCam alerts?"]},
         "na": ["Can the LumaCam D4 recognise faces?", "What is the default motion sensitivity?",
                "Can I schedule the motion zones by time of day?"]},
        {"text": "Video clips are kept in the cloud for [[days|30 days]] with a LumaCam Plus subscription. Without a subscription, clips can be saved on a microSD card of up to [[sd|128 GB]]. Privacy masks black out areas such as a [[mask|neighbour's window]] so they are never recorded.",
         "qa": {"days": ["How long are LumaCam clips kept in the cloud?", "For how many days does LumaCam Plus store clips?"],
                "sd": ["What is the largest microSD card the LumaCam D4 supports?"],
                "mask": ["What is an example of an area a privacy mask can black out?"]},
         "na": ["How much does a LumaCam Plus subscription cost?", "Where are the LumaCam cloud servers located?",
                "Can clips be downloaded to a computer?"]},
    ]},
    {"slug": "pureair-p5", "title": "PureAir P5 Air Purifier: Owner's Guide", "paragraphs": [
        {"text": "The PureAir P5 cleans rooms of up to [[room|40 square metres]] with a clean air delivery rate of [[cadr|300 cubic metres per hour]]. Air passes through a [[stages|three-stage filter]]: a washable pre-filter, a true HEPA layer and an activated carbon layer. A laser sensor measures [[pm|PM2.5]] particles and shows the air quality as a coloured ring.",
         "qa": {"room": ["How large a room can the PureAir P5 clean?", "What room size is the PureAir P5 made for?"],
                "cadr": ["What is the clean air delivery rate of the PureAir P5?"],
                "stages": ["What kind of filter does the PureAir P5 use?"],
                "pm": ["Which particles does the PureAir P5 sensor measure?"]},
         "na": ["Does the PureAir P5 remove viruses?", "How much does the PureAir P5 weigh?",
                "What does a purple ring mean on the PureAir P5?"]},
        {"text": "Replace the main filter of the PureAir P5 every [[months|six months]], or when the filter light turns [[red|red]]. The replacement filter has the part number [[part|PF-5]]. After fitting a new filter, press and hold the filter button for [[reset|three seconds]] to reset the reminder.",
         "qa": {"months": ["How often should the PureAir P5 filter be replaced?", "After how many months is a new P5 filter needed?"],
                "red": ["What colour does the filter light turn when the filter must be replaced?"],
                "part": ["What is the part number of the PureAir P5 replacement filter?"],
                "reset": ["How long do I hold the filter button to reset the reminder?"]},
         "na": ["How much does a PF-5 filter cost?", "Can the HEPA filter be washed?",
                "Where can I recycle an old PureAir filter?"]},
        {"text": "In Sleep mode the PureAir P5 runs at only [[noise|22 dB]] and dims all lights. Auto mode changes the fan speed according to the PM2.5 reading. Turbo mode runs the fan at full speed for [[turbo|20 minutes]] and then returns to Auto. The child lock is turned on by holding the power button and the mode button together for [[lock|five seconds]].",
         "qa": {"noise": ["How loud is the PureAir P5 in Sleep mode?"],
                "turbo": ["How long does Turbo mode run?", "For how long does the P5 run at full speed in Turbo mode?"],
                "lock": ["How do I turn on the child lock?", "How long do I hold the buttons to turn on the child lock?"]},
         "na": ["How many fan speeds does the PureAir P5 have?", "How loud is the PureAir P5 in Turbo mode?",
                "Can Sleep mode be scheduled from the app?"]},
        {"text": "Place the PureAir P5 at least [[wall|30 centimetres]] away from walls and furniture so that air can flow freely. Vacuum the pre-filter every [[vac|two weeks]], or wash it with water and let it dry completely before refitting. Do not use the purifier in a bathroom, because humidity above [[hum|85 percent]] damages the HEPA layer.",
         "qa": {"wall": ["How far from walls should the PureAir P5 be placed?"],
                "vac": ["How often should the pre-filter be vacuumed?", "How often do I clean the PureAir pre-filter?"],
                "hum": ["Above what humidity is the HEPA layer damaged?"]},
         "na": ["Can the PureAir P5 be mounted on a wall?", "How long does the pre-filter take to dry?",
                "Can two PureAir P5 units be linked together?"]},
        {"text": "The PureAir P5 draws [[power|45 watts]] at full speed and weighs [[weight|5.2 kilograms]]. It comes with a [[warr|two-year warranty]], extended to [[motor|five years for the motor]] when you register the purifier within [[reg|30 days]] of purchase.",
         "qa": {"power": ["How much power does the PureAir P5 draw at full speed?"],
                "weight": ["How much does the PureAir P5 weigh?"],
                "warr": ["How long is the PureAir P5 warranty?"],
                "motor": ["How long is the motor of the PureAir P5 covered after registration?"],
                "reg": ["Within how many days must I register the PureAir P5?"]},
         "na": ["Does the PureAir P5 warranty cover the filters?", "What is the standby power of the PureAir P5?",
                "How do I register the PureAir P5?"]},
    ]},
    {"slug": "voltride-s2", "title": "VoltRide S2 Electric Scooter: Rider Manual", "paragraphs": [
        {"text": "The VoltRide S2 reaches a top speed of [[top|25 km/h]] and travels up to [[range|35 kilometres]] on one charge. It carries riders of up to [[load|100 kilograms]] and folds in three seconds for carrying. The scooter has [[tyres|8.5-inch pneumatic tyres]] and front and rear lights.",
         "qa": {"top": ["What is the top speed of the VoltRide S2?", "How fast can the VoltRide S2 go?"],
                "range": ["How far can the VoltRide S2 travel on one charge?"],
                "load": ["What is the maximum rider weight for the VoltRide S2?"],
                "tyres": ["What tyres does the VoltRide S2 have?"]},
         "na": ["How much does the VoltRide S2 weigh?", "Can the VoltRide S2 climb steep hills?",
                "How long does the VoltRide S2 take to fold?"]},
        {"text": "Charge the VoltRide S2 only with the supplied [[charger|42 V charger]]. A full charge takes about [[time|four and a half hours]]. The charger light is [[red|red]] while charging and turns green when the battery is full. Do not charge the scooter at temperatures below [[cold|0 °C]].",
         "qa": {"charger": ["Which charger should be used for the VoltRide S2?"],
                "time": ["How long does it take to charge the VoltRide S2?", "How long is a full charge of the S2?"],
                "red": ["What colour is the charger light while the VoltRide S2 is charging?"],
                "cold": ["Below what temperature should the VoltRide S2 not be charged?"]},
         "na": ["What is the battery capacity of the VoltRide S2?", "Can I use a fast charger with the VoltRide S2?",
                "How many charge cycles does the VoltRide S2 battery last?"]},
        {"text": "The VoltRide S2 has three riding modes. Eco mode limits the speed to [[eco|15 km/h]], Drive mode to 20 km/h and Sport mode to 25 km/h. To change the mode, [[press|double-press the power button]]. Cruise control engages after holding the throttle steady for [[cruise|eight seconds]].",
         "qa": {"eco": ["What is the speed limit in Eco mode?", "How fast does the VoltRide S2 go in Eco mode?"],
                "press": ["How do I change the riding mode on the VoltRide S2?"],
                "cruise": ["How long do I hold the throttle steady to engage cruise control?"]},
         "na": ["Which riding mode gives the longest range?", "How do I turn off cruise control?",
                "Can I set a custom speed limit on the VoltRide S2?"]},
        {"text": "Check the tyre pressure of the VoltRide S2 every week and keep it at [[psi|50 psi]]. The brakes are adjusted with a [[hex|3 mm hex key]] at the caliper. Every [[service|300 kilometres]], tighten the folding mechanism and check the stem for play.",
         "qa": {"psi": ["What tyre pressure should the VoltRide S2 have?", "At what pressure should I keep the S2 tyres?"],
                "hex": ["Which tool adjusts the brakes of the VoltRide S2?"],
                "service": ["How often should the folding mechanism be tightened?"]},
         "na": ["How often should the brake pads be replaced?", "Where can I buy replacement tyres for the VoltRide S2?",
                "How do I fix a flat tyre?"]},
        {"text": "The VoltRide S2 is rated [[ip|IP54]], so it can handle splashes but must not be ridden in heavy rain or through puddles. The frame is covered by a [[frame|two-year warranty]] and the battery by a [[battwarr|one-year warranty]]. Always wear a helmet; riders must be at least [[age|14 years old]].",
         "qa": {"ip": ["What is the water resistance rating of the VoltRide S2?"],
                "frame": ["How long is the frame of the VoltRide S2 under warranty?"],
                "battwarr": ["How long is the VoltRide S2 battery warranty?"],
                "age": ["How old must riders of the VoltRide S2 be?", "What is the minimum rider age for the S2?"]},
         "na": ["Does the VoltRide S2 warranty cover tyre punctures?", "Is a helmet included with the VoltRide S2?",
                "Is the VoltRide S2 legal on public roads?"]},
    ]},
]

MARK_RE = re.compile(r"\[\[([a-z0-9]+)\|([^\]]+)\]\]")


def parse_paragraph(src):
    """Strips [[key|text]] markers; returns (context, {key: (start, text)})
    with code-point offsets into the returned context."""
    out = []
    spans = {}
    pos = 0
    length = 0
    for m in MARK_RE.finditer(src):
        before = src[pos:m.start()]
        out.append(before)
        length += len(before)
        key, text = m.group(1), m.group(2)
        if key in spans:
            raise ValueError(f"duplicate answer key {key!r}")
        spans[key] = (length, text)
        out.append(text)
        length += len(text)
        pos = m.end()
    out.append(src[pos:])
    context = "".join(out)
    if "[[" in context or "]]" in context:
        raise ValueError(f"unbalanced marker in: {src[:60]}")
    for key, (start, text) in spans.items():
        assert context[start:start + len(text)] == text, key
    return context, spans


def build_manuals():
    manuals = []
    for m in MANUALS:
        paras = []
        for pi, p in enumerate(m["paragraphs"]):
            context, spans = parse_paragraph(p["text"])
            missing = sorted(set(p["qa"]) - set(spans))
            unused = sorted(set(spans) - set(p["qa"]))
            if missing or unused:
                raise ValueError(f"{m['slug']} p{pi}: keys without span {missing}, spans without question {unused}")
            paras.append({"index": pi, "context": context, "spans": spans, "qa": p["qa"], "na": p["na"]})
        manuals.append({"slug": m["slug"], "title": m["title"], "paragraphs": paras})
    return manuals


def split_paragraphs(manuals, seed):
    """Per manual: one paragraph to test, one to dev, the rest to train."""
    rng = random.Random(f"{seed}/paragraph-split")
    assign = {}
    for m in manuals:
        idx = [p["index"] for p in m["paragraphs"]]
        rng.shuffle(idx)
        for k, pi in enumerate(idx):
            assign[(m["slug"], pi)] = "test" if k == 0 else "dev" if k == 1 else "train"
    return assign


def make_qa(manuals, assign, seed):
    rng = random.Random(f"{seed}/qa")
    out = {s: {"version": "v2.0", "data": []} for s in SPLITS}
    for m in manuals:
        per_split = {s: [] for s in SPLITS}
        for p in m["paragraphs"]:
            qas = []
            for key in p["qa"]:
                start, text = p["spans"][key]
                for qi, q in enumerate(p["qa"][key]):
                    qas.append({"id": f"{m['slug']}-p{p['index']}-{key}-{qi}", "question": q,
                                "answers": [{"text": text, "answer_start": start}],
                                "is_impossible": False})
            for qi, q in enumerate(p["na"]):
                qas.append({"id": f"{m['slug']}-p{p['index']}-na-{qi}", "question": q,
                            "answers": [], "is_impossible": True})
            rng.shuffle(qas)
            per_split[assign[(m["slug"], p["index"])]].append({"context": p["context"], "qas": qas})
        for s in SPLITS:
            if per_split[s]:
                out[s]["data"].append({"title": m["title"], "paragraphs": per_split[s]})
    # Re-check every span against its context.
    for s in SPLITS:
        for art in out[s]["data"]:
            for para in art["paragraphs"]:
                for qa in para["qas"]:
                    for a in qa["answers"]:
                        c = para["context"]
                        assert c[a["answer_start"]:a["answer_start"] + len(a["text"])] == a["text"], qa["id"]
                    assert qa["is_impossible"] == (not qa["answers"]), qa["id"]
    return out


def make_rerank(manuals, assign, seed, n_hard=3, n_easy=2):
    """Dev and test groups draw their negatives from every split (as a
    search over the whole manual corpus would). Training groups draw theirs
    from training paragraphs only: with negatives from any split, 203 of the
    445 manual training negatives were dev or test paragraphs, each seen ~17
    times as irrelevant and never as relevant, and the reranker learnt to
    push exactly the paragraphs that the eval queries look for down (issue 25:
    manual queries scored below a random order). Training groups then have
    the 2 other training paragraphs of the manual as hard negatives and
    n_easy + 1 training paragraphs of other manuals. The eval groups are the
    same as before the fix (the shared rng draws exactly as it did)."""
    rng = random.Random(f"{seed}/rerank")
    train_rng = random.Random(f"{seed}/rerank/train-negatives")
    out = {s: [] for s in SPLITS}
    for m in manuals:
        for p in m["paragraphs"]:
            split = assign[(m["slug"], p["index"])]
            same = [q["context"] for q in m["paragraphs"] if q["index"] != p["index"]]
            other = [q["context"] for o in manuals if o["slug"] != m["slug"] for q in o["paragraphs"]]
            in_train = lambda o, q: assign[(o["slug"], q["index"])] == "train"  # noqa: E731
            same_train = [q["context"] for q in m["paragraphs"] if q["index"] != p["index"] and in_train(m, q)]
            other_train = [q["context"] for o in manuals if o["slug"] != m["slug"]
                           for q in o["paragraphs"] if in_train(o, q)]
            for key in p["qa"]:
                for query in p["qa"][key]:
                    group = [{"query": query, "passage": p["context"], "label": 1}]
                    hard = rng.sample(same, min(n_hard, len(same)))
                    easy = rng.sample(other, n_easy)
                    if split == "train":
                        hard = train_rng.sample(same_train, min(n_hard, len(same_train)))
                        easy = train_rng.sample(other_train, n_easy + n_hard - len(hard))
                    for c in hard + easy:
                        group.append({"query": query, "passage": c, "label": 0})
                    rng.shuffle(group)
                    out[split].append(group)
    for s in SPLITS:
        rng.shuffle(out[s])
    return out


FIRST_SENTENCE_RE = re.compile(r"(.+?[.!?])(?:\s|$)")


def first_sentence(text):
    m = FIRST_SENTENCE_RE.match(text)
    return m.group(1) if m else text


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def write_json(path, obj):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        json.dump(obj, f, ensure_ascii=False, indent=1)
        f.write("\n")


def write_docs(path, docs):
    """docs: list of lists of lines; blank line between documents."""
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("\n\n".join("\n".join(d) for d in docs))
        f.write("\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output directory (created if missing)")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--scale", type=float, default=1.0,
                    help="multiplies the ticket counts (2400/300/300 at 1.0)")
    args = ap.parse_args(argv)
    if not (0.02 <= args.scale <= 20):
        ap.error("--scale must be between 0.02 and 20")
    os.makedirs(args.out, exist_ok=True)
    p = lambda name: os.path.join(args.out, name)  # noqa: E731

    tickets = make_tickets(args.seed, args.scale)
    manuals = build_manuals()
    assign = split_paragraphs(manuals, args.seed)
    qa = make_qa(manuals, assign, args.seed)
    sheets = make_sheets(args.seed)
    for s in SPLITS:
        qa[s]["data"].extend(sheets[s])
    rerank = make_rerank(manuals, assign, args.seed)
    sheet_rerank = make_sheet_rerank(sheets, args.seed)
    for s in SPLITS:
        # Sheet groups after the manual ones, then one shuffle of the whole split.
        rerank[s].extend(sheet_rerank[s])
        if s == "train":
            rerank[s].extend(make_rerank_training_sheets(sheets, args.seed))
        random.Random(f"{args.seed}/rerank-mix/{s}").shuffle(rerank[s])
    # The training file also holds groups of sentences within one sheet
    # (product_sheets.make_sentence_rerank_groups): only there, not in the
    # first-sentence file or the MLM corpus below, which stay as they were.
    rerank_train_file = rerank["train"] + make_sentence_rerank_groups(sheets, args.seed, rerank["train"])
    random.Random(f"{args.seed}/rerank-mix/train-sentences").shuffle(rerank_train_file)
    queries = [g[0]["query"] for g in rerank_train_file]
    assert len(set(queries)) == len(queries), "a rerank training query repeats (the trainer groups rows by query)"

    for s in SPLITS:
        write_jsonl(p(f"tickets_{s}.jsonl"), tickets[s])
        write_json(p(f"qa_{s}.json"), qa[s])
        write_jsonl(p(f"rerank_{s}.jsonl"),
                    [row for g in (rerank_train_file if s == "train" else rerank[s]) for row in g])
        if s != "test":
            # The demo reranker's first stage (recipes.sh, rerank_first): the
            # same groups with each passage cut to its first sentence, where
            # the product's name is one of ~12 tokens instead of ~90.
            write_jsonl(p(f"rerank_{s}_first.jsonl"),
                        [dict(row, passage=first_sentence(row["passage"])) for g in rerank[s] for row in g])
    write_docs(p("manuals.txt"), [[m["title"]] + [q["context"] for q in m["paragraphs"]] for m in manuals])
    for s in ("train", "dev"):
        docs = []
        for m in manuals:
            paras = [q["context"] for q in m["paragraphs"] if assign[(m["slug"], q["index"])] == s]
            docs.append([m["title"]] + paras)
        docs.extend([art["title"]] + [para["context"] for para in art["paragraphs"]] for art in sheets[s])
        docs.extend([t["text"]] for t in tickets[s])
        write_docs(p(f"mlm_{s}.txt"), docs)
        if s == "train":
            # The demo MLM's corpus: the same, then each rerank training query
            # beside its relevant passage (two lines: two segments for the
            # sentence-order objective). The product name repeats across the
            # pair, so masked names are learnt by copying from the other
            # segment; with these the demo MLM leaves its unigram plateau
            # (dev loss 6.0 -> 2.9, issue 25). The tokenizer trains on
            # mlm_train.txt (spm finds too few pieces in the repeated pairs).
            docs.extend([g[0]["query"], next(r["passage"] for r in g if r["label"] > 0)] for g in rerank[s])
            write_docs(p("mlm_train_pairs.txt"), docs)

    # stats.json
    stats = {"seed": args.seed, "scale": args.scale, "intents": INTENTS, "tags": ALL_TAGS,
             "classify": {}, "qa": {}, "rerank": {}, "mlm": {}}
    for s in SPLITS:
        rows = tickets[s]
        stats["classify"][s] = {
            "count": len(rows),
            "intents": {i: sum(r["label"] == i for r in rows) for i in INTENTS},
            "tags": {t: sum(t in r["tags"] for r in rows) for t in ALL_TAGS},
            "untagged": sum(not r["tags"] for r in rows),
        }
        qs = [qa_ for art in qa[s]["data"] for para in art["paragraphs"] for qa_ in para["qas"]]
        n_imp = sum(q["is_impossible"] for q in qs)
        stats["qa"][s] = {
            "paragraphs": sum(len(art["paragraphs"]) for art in qa[s]["data"]),
            "questions": len(qs), "answerable": len(qs) - n_imp, "unanswerable": n_imp,
            "unanswerable_fraction": round(n_imp / len(qs), 4),
            "product_sheets": SHEETS[s],
            "product_sheet_questions": sum(len(para["qas"]) for art in sheets[s] for para in art["paragraphs"]),
        }
        groups = rerank_train_file if s == "train" else rerank[s]
        stats["rerank"][s] = {"queries": len(groups), "pairs": sum(len(g) for g in groups),
                              "positives": sum(r["label"] for g in groups for r in g)}
    all_q = sum(stats["qa"][s]["questions"] for s in SPLITS)
    all_imp = sum(stats["qa"][s]["unanswerable"] for s in SPLITS)
    stats["qa"]["all"] = {"questions": all_q, "unanswerable": all_imp,
                          "unanswerable_fraction": round(all_imp / all_q, 4)}
    stats["manuals"] = {"documents": len(manuals),
                        "paragraphs": sum(len(m["paragraphs"]) for m in manuals)}
    for s in ("train", "dev"):
        with open(p(f"mlm_{s}.txt"), encoding="utf-8") as f:
            text = f.read()
        stats["mlm"][s] = {"documents": len(text.strip().split("\n\n")),
                           "lines": sum(1 for line in text.splitlines() if line.strip()),
                           "chars": len(text)}
    write_json(p("stats.json"), stats)
    for s in SPLITS:
        if stats["qa"][s]["unanswerable_fraction"] < 0.30:
            raise SystemExit(f"internal error: qa_{s} has under 30% unanswerable questions")
    c = stats["classify"]
    print(f"wrote {args.out}: tickets {c['train']['count']}/{c['dev']['count']}/{c['test']['count']}, "
          f"qa {stats['qa']['train']['questions']}/{stats['qa']['dev']['questions']}/"
          f"{stats['qa']['test']['questions']} questions "
          f"({100 * stats['qa']['all']['unanswerable_fraction']:.0f}% unanswerable), "
          f"rerank {stats['rerank']['train']['queries']}/{stats['rerank']['dev']['queries']}/"
          f"{stats['rerank']['test']['queries']} queries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
