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
"""

from __future__ import annotations

from dataclasses import dataclass


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
    frequency: float = 1.0  # relative frequency of the channel's events


CHANNELS: tuple[Channel, ...] = (
    Channel("subsidy", "Policy planning", "predictive", +1, +1, 20,
            ("expand consumption subsidies for buyers", "launch new purchase subsidies", "win increased fiscal support"),
            ("see consumption subsidies phased out", "lose purchase subsidies", "face cuts to fiscal support"),
            "Government subsidies stimulate end demand and lift sales volumes", 1.5),
    Channel("pricing", "Company fundamentals", "misleading", +1, -1, 30,
            ("raise product prices", "announce price hikes", "lift list prices"),
            ("cut product prices", "announce steep price cuts", "slash list prices"),
            "Product price changes move gross margins and profitability"),
    Channel("capacity", "Supply and capacity", "misleading", +1, -1, 40,
            ("announce major capacity expansion", "break ground on new plants", "ramp up production capacity"),
            ("shut down production lines", "announce capacity reductions", "idle several plants"),
            "Capacity expansion signals growth in future output and revenue"),
    Channel("earnings", "Company fundamentals", "predictive", +1, +1, 10,
            ("report earnings above consensus", "post record quarterly profits", "beat profit forecasts"),
            ("report earnings below consensus", "post a surprise quarterly loss", "miss profit forecasts"),
            "Earnings surprises revise expected profitability of the sector", 1.5),
    Channel("trade", "Geopolitics", "predictive", +1, +1, 40,
            ("see export restrictions eased", "win tariff exemptions", "regain access to overseas markets"),
            ("face new export restrictions", "are hit by retaliatory tariffs", "lose access to overseas markets"),
            "Trade barriers and export access shape overseas revenue", 1.5),
    Channel("buzz", "Market sentiment", "noise", +1, 0, 10,
            ("trend strongly on social media", "draw enthusiastic retail chatter", "dominate online investment forums"),
            ("face a wave of online criticism", "draw negative social media attention", "are mocked on investment forums"),
            "Retail investor attention and social media sentiment drive flows"),
    Channel("rating", "Market sentiment", "noise", +1, 0, 10,
            ("receive broker rating upgrades", "get raised target prices from analysts", "are upgraded to buy by brokers"),
            ("receive broker rating downgrades", "get cut target prices from analysts", "are downgraded to sell by brokers"),
            "Sell-side rating changes steer institutional positioning"),
    Channel("costs", "Macroeconomy", "predictive", +1, +1, 20,
            ("benefit from falling raw material costs", "see input costs decline", "enjoy cheaper energy and materials"),
            ("face rising raw material costs", "see input costs surge", "absorb pricier energy and materials"),
            "Input cost changes pass through to operating margins", 1.5),
    Channel("probe", "Regulation", "misleading", +1, -1, 20,
            ("see a regulatory probe closed", "receive regulatory approval after review", "are cleared by regulators"),
            ("face a new regulatory probe", "are summoned by regulators", "come under antitrust investigation"),
            "Regulatory scrutiny raises compliance risk and penalties"),
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


def match_phrase(text: str) -> tuple[int, int] | None:
    """``(channel index, polarity)`` of the first channel phrase found in ``text`` (longest match wins)."""
    low = text.lower()
    best = None
    for k, ch in enumerate(CHANNELS):
        for pol, phrases in ((+1, ch.up), (-1, ch.down)):
            for ph in phrases:
                if ph in low and (best is None or len(ph) > best[2]):
                    best = (k, pol, len(ph))
    return None if best is None else (best[0], best[1])


def match_direction(text: str) -> int | None:
    """Channel index whose analytical direction ``text`` restates (prefix match), else None."""
    low = text.lower().strip()
    for k, ch in enumerate(CHANNELS):
        if low.startswith(ch.direction.lower()):
            return k
    return None
