"""The synthetic market's latent news channels: text forms, true effects and analytical readings.

A *channel* is a kind of news event (subsidies, price changes, capacity, ...).
An event has a polarity ``p`` in {+1, -1}, rendered by one of the channel's
phrases. Its *intuitive reading* is ``intuitive_sign * p`` (what a plain reader
concludes), its *true effect* on the industry's future excess return is
``true_sign * p * size``, spread evenly over ``duration`` trading days. Roles:

- ``predictive``: the intuitive reading is right (``true_sign == intuitive_sign``);
- ``misleading``: the intuitive reading is wrong (the paper's price-cut example:
  cutting prices reads as bad for profits but lifts volumes and share);
- ``noise``: no effect at all, whatever the text suggests.

The simulated policy (:mod:`engine.finance.simulated`) reads these phrases to
parse our synthetic news; the generator (:mod:`engine.finance.synthetic`) is
the only place that uses ``true_sign``.

Texts for semantic retrieval (ToE's leaf threshold ``lam = 0.8`` is a cosine): a news item
names its event with one of the phrases and carries two of the channel's ``notes``, an
analyst's comment that paraphrases the channel's ``direction``; an analyst of an industry
writes the direction with the industry's label (:func:`direction_text`). Under
all-MiniLM-L6-v2 a news item and its own channel's direction score 0.86 (median; 92% at or
above 0.8, the misses mostly news about two industries), other channels' directions 0.36 (none
at 0.8): every finance run measures it (``meta.retrieval_cosines``, engine/finance/retrieval.py)
and docs/finance.md renders the shipped run's table.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class Channel:
    name: str
    factor: str
    role: str  # "predictive" | "misleading" | "noise"
    intuitive_sign: int
    true_sign: int
    duration: int  # trading days over which the true effect is realised
    up: tuple[str, ...]  # phrases of polarity +1
    down: tuple[str, ...]  # phrases of polarity -1
    direction: str  # the analytical direction a reader would propose (its intuitive reading)
    notes: tuple[str, ...]  # the analyst's comment a news item carries: the direction, paraphrased
    frequency: float = 1.0  # relative frequency of the channel's events


CHANNELS: tuple[Channel, ...] = (
    Channel("subsidy", "Policy planning", "predictive", +1, +1, 20,
            ('see government purchase subsidies for buyers expanded',
             'win new government purchase subsidies for buyers',
             'gain larger government subsidies for buyers'),
            ('see government purchase subsidies for buyers phased out',
             'lose government purchase subsidies for buyers',
             'face cuts to government subsidies for buyers'),
            'Government purchase subsidies for buyers drive end demand and sales volumes',
            ('Government purchase subsidies for buyers drive end demand and sales volumes.',
             'Purchase subsidies for buyers move end demand and sales volumes.',
             'Government subsidies for buyers shift end demand and unit sales volumes.'), 1.5),
    Channel("pricing", "Company fundamentals", "misleading", +1, -1, 30,
            ('raise selling prices',
             'announce selling price hikes',
             'lift selling prices on products'),
            ('cut selling prices',
             'lower selling prices',
             'slash selling prices on products'),
            'Changes in selling prices move the profit earned on each unit sold',
            ('Changes in selling prices move the profit earned on each unit sold.',
             'Selling price changes shift the profit made on each unit sold.',
             'Higher or lower selling prices move the profit earned per unit sold.')),
    Channel("capacity", "Supply and capacity", "misleading", +1, -1, 40,
            ('expand production capacity',
             'add new production capacity',
             'ramp up production capacity'),
            ('cut production capacity',
             'reduce production capacity',
             'shrink production capacity'),
            'Changes in production capacity signal future output and revenue',
            ('Changes in production capacity signal future output and revenue.',
             'Production capacity changes point to future output and revenue.',
             'Adding or cutting production capacity signals future output and revenue.')),
    Channel("earnings", "Company fundamentals", "predictive", +1, +1, 10,
            ('report quarterly earnings above consensus forecasts',
             'post record quarterly earnings beating forecasts',
             'beat consensus forecasts with quarterly earnings'),
            ('report quarterly earnings below consensus forecasts',
             'post quarterly earnings that miss consensus',
             'miss consensus forecasts with quarterly earnings'),
            'Quarterly earnings surprises against consensus forecasts revise expected earnings',
            ('Quarterly earnings surprises against consensus forecasts revise expected earnings.',
             'Earnings surprises versus consensus forecasts revise expected quarterly earnings.',
             'Quarterly earnings above or below consensus forecasts revise expected earnings.'), 1.5),
    Channel("trade", "Geopolitics", "predictive", +1, +1, 40,
            ('see export restrictions and tariffs eased',
             'win exemptions from export tariffs',
             'regain export access to overseas markets'),
            ('face new export restrictions and tariffs',
             'are hit by retaliatory export tariffs',
             'lose export access to overseas markets'),
            'Export restrictions and tariffs shape access to overseas markets and export revenue',
            ('Export restrictions and tariffs shape access to overseas markets and export revenue.',
             'Export tariffs and restrictions decide overseas market access and export revenue.',
             'Tariffs and export restrictions govern access to overseas markets and export revenue.'), 1.5),
    Channel("buzz", "Market sentiment", "noise", +1, +0, 10,
            ('trend on social media among retail investors',
             'draw enthusiastic social media chatter from retail investors',
             'dominate retail investor chatter online'),
            ('face social media criticism from retail investors',
             'draw negative social media chatter from retail investors',
             'are mocked in retail investor chatter online'),
            'Social media chatter among retail investors drives online attention and trading flows',
            ('Social media chatter among retail investors drives online attention and trading flows.',
             'Retail investor chatter on social media moves online attention and trading flows.',
             'Social media buzz among retail investors steers online attention and trading flows.')),
    Channel("rating", "Market sentiment", "noise", +1, +0, 10,
            ('receive broker rating upgrades',
             'get higher target prices from brokers',
             'are upgraded to buy in broker ratings'),
            ('receive broker rating downgrades',
             'get lower target prices from brokers',
             'are downgraded to sell in broker ratings'),
            'Broker rating and target price changes steer institutional positioning',
            ('Broker rating and target price changes steer institutional positioning.',
             'Changes in broker ratings and target prices steer how institutions position.',
             'Broker ratings and target prices from sell-side analysts steer institutional positioning.')),
    Channel("costs", "Macroeconomy", "predictive", +1, +1, 20,
            ('see raw material and energy costs fall',
             'benefit from cheaper raw material and energy costs',
             'enjoy lower raw material and energy costs'),
            ('see raw material and energy costs rise',
             'face pricier raw material and energy costs',
             'absorb higher raw material and energy costs'),
            'Raw material and energy costs pass through to production costs and operating margins',
            ('Raw material and energy costs pass through to production costs and operating margins.',
             'Raw material and energy costs flow into production costs and operating margins.',
             'Energy and raw material costs feed through to production costs and operating margins.'), 1.5),
    Channel("probe", "Regulation", "misleading", +1, -1, 20,
            ('see regulatory probes closed',
             'see regulatory investigations closed',
             'receive approval after regulatory investigations'),
            ('face new regulatory probes',
             'are summoned in regulatory investigations',
             'come under new regulatory investigations'),
            'Regulatory probes and investigations raise compliance risk and penalties',
            ('Regulatory probes and investigations raise compliance risk and penalties.',
             'Regulatory investigations and probes carry compliance risk and penalties.',
             'Probes and investigations by regulators raise compliance risk and possible penalties.')),
)

CHANNEL_INDEX = {c.name: k for k, c in enumerate(CHANNELS)}
FACTORS: tuple[str, ...] = tuple(dict.fromkeys(c.factor for c in CHANNELS))

# Qualifiers a proposer may append to a direction; near-duplicate siblings for the merger.
DIRECTION_VARIANTS = ("", " in the near term", " in the short term")

INDUSTRY_NAMES = (
    "Retail", "Semiconductors", "Autos", "Banks", "Pharmaceuticals", "Energy", "Real estate",
    "Food and beverage", "Steel", "Software", "Airlines", "Chemicals", "Telecom", "Utilities",
    "Machinery", "Media",
)


def industry_names(n: int) -> tuple[str, ...]:
    """The first ``n`` industry names (generic names beyond the built-in list)."""
    return tuple(INDUSTRY_NAMES[k] if k < len(INDUSTRY_NAMES) else f"Industry {k}" for k in range(n))


@lru_cache(maxsize=1 << 16)
def match_phrase(text: str) -> tuple[int, int] | None:
    """``(channel index, polarity)`` of the first channel phrase found in ``text`` (longest match wins).

    Cached: the simulated policy reads the same news titles in many prompts (5 % of a finance worker's CPU
    at 16 workers went to scanning them again)."""
    low = text.lower()
    best = None
    for k, ch in enumerate(CHANNELS):
        for pol, phrases in ((+1, ch.up), (-1, ch.down)):
            for ph in phrases:
                if ph in low and (best is None or len(ph) > best[2]):
                    best = (k, pol, len(ph))
    return None if best is None else (best[0], best[1])


def direction_text(channel: Channel, industry: str) -> str:
    """The channel's analysis direction as an analyst of ``industry`` writes it: ``"<industry>: <direction>"``."""
    return f"{industry}: {channel.direction}"


def match_direction(text: str) -> int | None:
    """Channel index whose analytical direction ``text`` restates (prefix match, after an optional
    ``"<industry>: "`` label as :func:`direction_text` writes it), else None."""
    low = text.lower().strip()
    tail = low.split(": ", 1)[1] if ": " in low else low
    for k, ch in enumerate(CHANNELS):
        d = ch.direction.lower()
        if low.startswith(d) or tail.startswith(d):
            return k
    return None
