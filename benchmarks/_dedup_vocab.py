"""Word lists and fact templates for ``benchmarks/_dedup_data.py`` (the generated problems of
``benchmarks/dedup.py``).

Template language (resolved by ``_dedup_data.Slots.fill``): ``{slot}`` a word drawn for the
problem (names, objects, verbs...), ``[a|b]`` one wording, ``<lo-hi>`` a random integer,
``<frac>`` a LaTeX fraction.
"""

from __future__ import annotations

ONSETS = "b br c ch d dr f g gr h j k l m n p pr r s sh st t tr v w z".split()
VOWELS = "a e i o u ai ea io ou".split()
CODAS = "n r l s th m nd rk x ck ll ng st".split()
OBJECTS = [o.replace("-", " ") for o in (
    "apples pears notebooks pencils marbles stamps tiles bottles candles buttons crayons "
    "postcards shells coins ribbons stickers lemons peaches oranges plums mangoes cookies "
    "muffins bagels pretzels cupcakes sandwiches tacos dumplings pies toy-cars kites puzzles "
    "balloons beads bracelets necklaces rings hats scarves gloves socks mittens umbrellas "
    "lanterns jars vases mugs plates bowls spoons forks cups teapots baskets boxes crates "
    "barrels bricks planks nails screws bolts hammers wrenches ropes chains keys locks bells "
    "drums flutes violins books magazines comics maps globes posters paintings sketches photos "
    "seeds bulbs tulips roses daisies lilies cacti ferns saplings acorns pinecones feathers "
    "eggs potatoes carrots onions peppers tomatoes melons cherries grapes figs dates walnuts "
    "almonds chestnuts batteries cables lamps fans clocks watches radios cameras tickets "
    "badges medals trophies flags banners tents sleeping-bags backpacks suitcases wallets"
).split()]
ADJECTIVES = (
    "red blue green yellow purple orange silver golden wooden glass plastic metal paper "
    "antique modern tiny huge heavy light striped spotted shiny dusty fresh frozen organic "
    "handmade imported local rare vintage rustic polished painted carved woven knitted "
    "ceramic marble copper bronze velvet linen cotton leather bamboo clay crystal"
).split()
PLACES = (
    "market bakery library harbor museum garden workshop stadium theater station airport "
    "pharmacy bookstore toy-shop hardware-store flower-shop fish-market farm orchard vineyard "
    "greenhouse warehouse factory studio gallery cafe diner canteen school college campus "
    "park zoo aquarium beach campsite cabin lighthouse castle village fair carnival bazaar "
    "mall arcade gym pool rink ranch dairy mill bridge pier"
).split()
PLACES = [p.replace("-", " ") for p in PLACES]
COLORS = ("red blue green yellow white black purple orange pink brown gray violet teal "
          "maroon navy ivory amber indigo").split()
CONTAINERS = "bag box jar urn basket drawer chest crate bucket tin".split()
STRUCTURES = ("fence wall shed barn porch deck gate bridge roof garage hallway classroom "
              "kitchen attic cellar boat").split()
MONTHS = ("January February March April May June July August September October November "
          "December").split()
DAYS = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()
UNITS = ("kilometers", "miles")
OPENERS = (
    "On a {adj} {day} in {month}, {name} visits the {place}.",
    "{name} has just moved to {town}.",
    "The {place} in {town} is busy this {day}.",
    "It is {month}, and {name} is planning ahead.",
    "{name} keeps careful records of everything.",
    "After school, {name} heads to the {place}.",
    "{name} and {name2} are neighbours in {town}.",
    "This question comes from a contest held in {town}.",
)
CLOSERS = (
    "Give your answer as a whole number.",
    "Round your answer to the nearest tenth if needed.",
    "Express your answer as a common fraction.",
    "Write the answer in simplest form.",
    "Show that your answer is reasonable.",
    "",
    "",
    "",
)

#: Facts a problem is built from (2 to 4 of them, about one protagonist) and the question
#: each can end the problem with. ``[a|b]`` picks a wording, ``<lo-hi>`` a number, ``<frac>``
#: a LaTeX fraction, ``{slot}`` a word from the lists above.
FACTS: tuple[tuple[str, str], ...] = (
    ("{name} [buys|orders|picks up] <3-40> {adj} {obj} at $<2-19> [each|apiece].",
     "How much does {name} spend on {obj}?"),
    ("At the {place}, {color} {obj2} [sell|go] for $<3-29> [per dozen|a dozen].",
     "What do <2-9> dozen {obj2} cost?"),
    ("{name} [drives|rides] <20-400> {unit} from {town} to {town2} at <20-90> {unit} per hour.",
     "How many hours does the [drive|ride] to {town2} take?"),
    ("A {color} train [leaves|departs] {town2} at <6-11>:<10-59> and [arrives in|reaches] "
     "{town3} <2-7> hours later.", "At what time does the train reach {town3}?"),
    ("{name}'s {structure} is a rectangle <4-60> feet [long|in length] and <3-45> feet wide.",
     "What is the [area|perimeter] of the {structure}?"),
    ("A {adj} {container} [holds|contains] <2-15> {color} {obj3} and <2-15> {color2} {obj3}.",
     "If {name} draws two {obj3} at random, what is the probability both are {color}?"),
    ("{name2} is <2-6> times as old as [the {adj2} cousin|little] {name3}.",
     "In how many years will {name2} be twice as old as {name3}?"),
    ("{name} [reads|skims] <12-90> pages of a {adj} novel about {obj} every {day}.",
     "How many pages does {name} read in <3-20> weeks?"),
    ("The {place2} in {town} [opens|starts serving] at <6-10> a.m. and [closes|shuts] at "
     "<4-11> p.m.", "For how many hours a week is the {place2} open?"),
    ("{name} [earns|makes] $<9-45> an hour [tutoring|gardening|delivering {obj}] and works "
     "<3-30> hours a week.", "How much does {name} earn in {month}?"),
    ("A {adj2} rope <20-300> [centimeters|inches] long is cut into pieces of <frac> of its "
     "length.", "How long is each piece of rope?"),
    ("{name2} [plants|sows] <4-25> rows of {color} tulips with <5-40> bulbs in each row.",
     "How many bulbs does {name2} plant?"),
    ("The {adj} tank at the {place} holds <100-900> liters and [leaks|loses] <2-25> liters "
     "[a day|each day].", "After how many days is the tank [empty|half empty]?"),
    ("{name} [flips|tosses] a [fair|bent] coin <3-9> times [on {day}|before lunch].",
     "What is the probability of [exactly|at least] <1-3> heads?"),
    ("A circle drawn by {name3} on {color} paper has [radius|diameter] <2-30> "
     "[cm|inches].", "What is the area of the circle, in terms of $\\pi$?"),
    ("{name} [saves|puts aside] $<2-50> in the first week of {month} and $<1-15> more each "
     "week after.", "How much has {name} saved after <5-30> weeks?"),
    ("[Tickets|Passes] to the {adj3} fair in {town3} cost $<4-30> for adults and $<2-15> for "
     "children.", "What do <2-6> adults and <2-9> children pay?"),
    ("{name}'s {adj} bike wheel has a diameter of <16-29> inches.",
     "How many turns does the wheel make over <1-5> miles?"),
    ("A {adj2} ladder <8-30> feet long leans against the {structure} with its foot <2-9> feet "
     "from the wall.", "How high up the wall does the ladder reach?"),
    ("{name3} [mixes|stirs together] <2-9> liters of <10-60>% juice with <2-9> liters of "
     "<5-90>% juice.", "What percent juice is the mixture?"),
    ("The price of a {adj} {obj2} [rises|goes up] by <5-40>% in {month} and then falls by "
     "<5-40>%.", "By what percent has the price changed overall?"),
    ("{name} [types|writes] <20-90> words a minute [on a {color} keyboard|for the {place}].",
     "How long does a <500-5000>-word essay take {name}?"),
    ("A {color} [die|spinner] with <4-20> [faces|sectors] [numbered|labelled] 1 to <4-20> is "
     "[rolled|spun] twice [by {name2}|at the {place}].",
     "What is the probability that the two results add up to <5-30>?"),
    ("{name} [arranges|lines up] {obj} in rows of <3-13> and has <1-9> left over.",
     "What is the smallest number of {obj} {name} could have if rows of <3-13> leave <1-9> "
     "over too?"),
    ("[Two|Three] pumps [at the {place}|in {town}] can fill a {adj} pool in <2-15> hours "
     "together.", "How long would one pump alone take?"),
    ("{name} [invests|deposits] $<100-9000> at <2-12>% interest compounded [yearly|monthly].",
     "What is the balance after <2-10> years?"),
    ("A {adj3} bookshelf in the {place} has <3-9> shelves with <12-40> {obj} on each.",
     "How many {obj} are on the bookshelf?"),
    ("{name2} [jogs|runs] <2-12> laps of a <200-800>-meter track [every morning|on {day}s].",
     "How many kilometers does {name2} run in <2-8> weeks?"),
    ("The {color} flag of {town} is a triangle with sides <3-20>, <4-21> and <5-22> inches.",
     "What is the area of the flag?"),
    ("{name} [bakes|makes] <2-12> trays of {adj} cookies with <8-30> cookies on each tray.",
     "If {name} gives away <frac> of the cookies, how many are left?"),
    ("A {adj} parking lot near the {place2} has <3-12> rows of <8-40> spaces, and <10-90>% are "
     "taken.", "How many spaces are free?"),
    ("The sum of [two|three] consecutive [odd|even] numbers on {name}'s {color} cards is "
     "<30-300>.", "What is the [largest|smallest] of the numbers?"),
    ("{name3} [walks|hikes] <3-20> {unit} [north|east] and then <3-20> {unit} [south|west].",
     "How far is {name3} from the start, in a straight line?"),
    ("A {adj} cube of {obj} [made by|belonging to] {name} has edges of <2-15> cm.",
     "What is the [volume|surface area] of the cube?"),
    ("{name} [scores|gets] <50-99>, <50-99> and <50-99> on three {adj2} quizzes.",
     "What score on the fourth quiz makes the average <70-95>?"),
    ("The {place} sells {adj3} {obj3} at a <5-60>% discount [on {day}s|in {month}].",
     "What is the sale price of a $<12-400> {obj3}?"),
    ("$p(x) = <2-9>x^2 - <2-30>x + <1-50>$ is written on {name}'s {color} board.",
     "Find $p(<2-9>)$ and the sum of the roots of $p$."),
    ("A recipe for {adj} {obj} [calls for|uses] <frac> cup of [sugar|flour|honey] per batch.",
     "How many cups are needed for <3-40> batches?"),
    ("{name2} [covers|tiles] a <6-40> by <5-30> foot {structure} floor with <2-6>-inch "
     "{color} tiles.", "How many tiles does {name2} need?"),
    ("A {color} bus [carries|holds] <20-60> passengers and [makes|runs] <3-15> trips to "
     "{town2} [a day|daily].", "How many passengers can it carry in <2-9> days?"),
    ("The ratio of {color} to {color2} {obj2} in {name}'s collection is <2-9>:<2-9>.",
     "If there are <20-300> {obj2} in all, how many are {color}?"),
    ("{name} [climbs|walks up] a hill at <1-5> {unit} per hour and [comes down|descends] at "
     "<3-9> {unit} per hour.", "What is the average speed for the round trip?"),
    ("A {adj2} pizza [ordered by|shared by] {name3} is cut into <6-16> equal slices.",
     "What is the angle of each slice, in degrees?"),
    ("{name} [owes|borrowed] $<50-900> to {name2} and [pays back|returns] $<5-80> a week.",
     "After how many weeks is the debt [paid|cleared]?"),
    ("The {place2} in {town2} has <2-9> {adj} [doors|gates] and <2-7> {color} [windows|"
     "skylights].", "In how many ways can {name} enter by a door and leave by another door?"),
    ("In {month}, the {adj3} orchard near {town3} [picks|harvests] <100-900> {obj} [a day|"
     "daily].", "How many {obj} are picked in the whole month?"),
    ("A password for the {place} uses <2-5> letters followed by <2-5> digits.",
     "How many passwords are possible?"),
    ("{name2} [fills|tops up] a {color} aquarium <20-120> cm long, <20-60> cm wide and "
     "<20-60> cm deep.", "How many liters of water does it hold?"),
    ("<3-9> friends of {name}, including {name3}, [sit|are seated] around a round table at "
     "the {place}.", "In how many ways can they sit if {name} and {name3} sit together?"),
    ("A {adj} clock in the {place2} [gains|loses] <1-9> minutes every <2-12> hours.",
     "How many minutes off is it after <2-14> days?"),
    ("The population of {town} [grows|rises] by <2-9>% a year from <1000-90000>.",
     "What is it after <2-10> years?"),
    ("{name3} [paints|colours] <frac> of a {adj2} fence on {day} and <frac> on the next day.",
     "What fraction of the fence is still unpainted?"),
    ("A {color} kite string <30-200> feet long makes an angle of <20-70> degrees with the "
     "ground.", "How high is the kite?"),
    ("{name} [shares|splits] <20-500> {adj} {obj2} between {name2} and {name3} in the ratio "
     "<1-9>:<1-9>.", "How many {obj2} does {name3} get?"),
    ("A {adj3} garden hose [delivers|pours out] <5-40> liters a minute [into the {container}|"
     "at the {place}].", "How long does it take to deliver <200-3000> liters?"),
    ("{name} [knits|crochets] <2-9> {color} scarves, each <80-200> cm long, for the {place}.",
     "How many meters of scarf is that in total?"),
    ("The {adj} ferry from {town} to {town3} [crosses|sails] <5-40> {unit} of open water in "
     "<20-90> minutes.", "What is the ferry's speed in {unit} per hour?"),
    ("{name2}'s {adj2} phone battery [drops|falls] <2-15> percent every hour of [video|music].",
     "How long does a full charge last?"),
    ("A {color} square photo frame [bought|found] by {name3} has a diagonal of <5-30> inches.",
     "What is the side length of the frame?"),
    ("{name} [sorts|stacks] <40-400> {obj3} into [boxes|crates] of <6-24> at the {place2}.",
     "How many [boxes|crates] are completely filled?"),
    ("The {adj3} choir in {town2} has <12-60> singers, and <frac> of them are [tenors|"
     "sopranos].", "How many singers are not [tenors|sopranos]?"),
    ("On {day}, {name2} [mows|trims] <2-9> lawns [in {town}|for neighbours] at $<15-60> "
     "[a lawn|per lawn].", "How much does {name2} earn that day?"),
    ("A {adj} water bottle [carried|packed] by {name} holds <frac> of a liter.",
     "How many bottles fill a <2-12>-liter [jug|cooler]?"),
    ("{name3}'s {color} cat [sleeps|naps] <10-18> hours a day [in the {structure}|on the "
     "{obj2}].", "How many hours is the cat awake in <2-8> weeks?"),
    ("An {adj2} elevator in the {place} [rises|climbs] <1-4> floors every <5-20> seconds.",
     "How long does it take to go up <10-80> floors?"),
    ("The {color} team [won|lost] <3-20> of its first <20-40> games [in {month}|this "
     "season].", "What percent of its games did the team [win|lose]?"),
    ("{name} [folds|makes] <5-60> paper cranes an hour for the {adj} festival in {town3}.",
     "How many hours are needed for <200-1000> cranes?"),
    ("A {adj3} sandbox at the {place2} is <2-9> feet by <2-9> feet and <frac> foot deep.",
     "How many cubic feet of sand fill it?"),
    ("{name2} [records|logs] temperatures of <-12-9>, <-5-15> and <0-25> degrees on three "
     "{color} mornings.", "What is the mean temperature?"),
    ("The {adj} printer at the {place} [prints|produces] <10-60> pages a minute [in "
     "colour|in black and white].", "How long does a <200-3000>-page job take?"),
    ("{name3} [cuts|slices] a {color} ribbon <1-9> meters long into <3-12> equal parts.",
     "How long is each part in centimeters?"),
    ("A {adj2} carousel at the {place2} turns <2-9> times a minute [for {name}|on {day}s].",
     "How many turns does it make in a <3-15>-minute ride?"),
    ("{name} [drinks|has] <frac> of a liter of [milk|tea|juice] at each meal, three meals a "
     "day.", "How many liters does {name} drink in a week?"),
    ("The {color} wall of {name2}'s {structure} is <8-30> feet long and <7-12> feet high, with "
     "a <2-5> by <3-7> foot window.", "How many square feet of wall need paint?"),
    ("A survey at the {adj} {place} finds that <10-90>% of <50-900> visitors like {obj}.",
     "How many visitors do not like {obj}?"),
    ("{name3} [rows|paddles] a {color} canoe <2-12> {unit} upstream in <1-5> hours.",
     "What is the speed of the canoe in still water if the current is <1-3> {unit} per hour?"),
    ("A {adj3} staircase in {town} has <8-40> steps, each <5-9> inches high.",
     "How many feet does the staircase rise?"),
    ("{name} [splits|divides] a $<10-99> {adj} dinner bill [evenly|equally] with <2-8> "
     "friends [and adds|plus] a <10-25>% tip.", "How much does each person pay?"),
    ("The {adj2} lighthouse near {town2} [flashes|blinks] every <3-20> seconds.",
     "How many flashes are there between <7-9> p.m. and <10-11> p.m.?"),
    ("{name2} [fences|encloses] a square {color} pen with <20-200> meters of wire.",
     "What area does the pen enclose?"),
    ("A {adj} {container} of {obj2} [weighs|has a mass of] <2-20> kg when full and <1-3> kg "
     "when empty.", "What do the {obj2} alone weigh in <3-12> such {container}s?"),
    ("The {color} digits of {name}'s locker code are [all different|distinct] and add up to "
     "<6-24>.", "How many three-digit codes are possible?"),
    ("At the {place2}, {name3} [trades|swaps] <2-9> {obj} for every <3-12> {obj3}.",
     "How many {obj} does {name3} get for <30-300> {obj3}?"),
    ("A {adj2} candle [burns|melts] <frac> of an inch every hour and is <4-14> inches tall.",
     "After how many hours is it half as tall?"),
    ("{name}'s {color} garden has <3-9> rows of <4-15> tomato plants, each [giving|bearing] "
     "<5-30> tomatoes.", "How many tomatoes does the garden give?"),
    ("The {adj} museum in {town3} had <100-999> visitors on {day}, <5-40>% more than the "
     "day before.", "How many visitors came the day before?"),
    ("{name2} [wraps|ties] <2-9> gifts using <30-150> cm of {color} ribbon each.",
     "How many meters of ribbon are left from a <5-20>-meter roll?"),
    ("A {adj3} snail [crawls|creeps] <2-9> feet up a {color} wall by day and slides back "
     "<1-3> feet at night.", "On which day does it reach the top of a <10-40>-foot wall?"),
    ("The {adj} café near the {place} sells <20-200> {obj2} [on weekdays|each weekday] and "
     "twice as many on weekends.", "How many {obj2} does it sell in a week?"),
    ("{name} [pours|empties] <2-9> cups of <1-5>% salt water into <2-9> cups of fresh water.",
     "What is the salt concentration now?"),
    ("A {color} hexagonal tile [laid|set] by {name3} has sides of <2-12> cm.",
     "What is the area of the tile?"),
    ("{name2} [uploads|posts] <2-15> {adj2} photos of {obj} a day [to a blog|online].",
     "How many photos are there after {month} and the month after?"),
    ("The {adj} bridge at {town2} is <100-999> meters long, and a {color} truck [crosses|"
     "drives over] it at <20-70> km per hour.", "How many seconds does the crossing take?"),
    ("{name3} [draws|picks] <2-5> cards from a standard deck [at the {place}|for {name}].",
     "What is the probability that all are [hearts|aces|face cards]?"),
    ("A {adj3} hot-air balloon over {town} [rises|ascends] <50-400> feet a minute.",
     "How long does it take to reach <1000-9000> feet?"),
    ("{name} [stacks|piles] {adj} {obj} in a pyramid with <3-15> in the bottom row and one "
     "fewer in each row above.", "How many {obj} are in the pyramid?"),
    ("The {color} {container} on {name2}'s desk [holds|has] pens in <3-7> colours, <2-9> of "
     "each.", "How many ways can {name2} choose <2-4> pens of different colours?"),
    ("A {adj2} marathon runner from {town3} [runs|covers] <10-42> km in <1-4> hours and "
     "<10-59> minutes.", "What is the runner's average pace per kilometer?"),
    ("{name3} [rents|hires] a {color} {obj2} for $<5-40> a day plus a $<10-90> deposit.",
     "What is the cost for <2-14> days, deposit included?"),
    ("The {adj} {place2} in {town} [uses|burns through] <100-900> kWh of power a week.",
     "What is the power bill for {month} at <10-40> cents per kWh?"),
    ("{name} [counts|tallies] <10-90> {adj3} birds at the {place}, <frac> of them "
     "[sparrows|pigeons].", "How many are not [sparrows|pigeons]?"),
    ("A {color} {obj3} spins <100-3000> times a minute in {name2}'s workshop.",
     "How many times does it spin in <2-30> seconds?"),
    ("The {adj2} orchestra in {town2} seats <3-9> rows of <8-20> players [on stage|in the "
     "pit].", "How many players fit on the stage?"),
    ("{name3} [swims|paddles] <10-80> lengths of a <20-50>-meter pool [before work|on "
     "{day}s].", "How many kilometers is that in <2-8> weeks?"),
    ("A {adj} jar on the {place} counter [holds|contains] <20-200> {color} and <20-200> "
     "{color2} [jelly beans|marbles].", "What fraction of them are {color}?"),
    ("{name2} [needs|uses] <2-9> {obj2} to make one {adj} [wreath|garland] for the "
     "{month} fair.", "How many wreaths can {name2} make from <30-300> {obj2}?"),
)

# Combinatorial fact families: verbs, objects, places, shapes and events are all drawn, so two
# problems that use the same family still differ in most of their words.
RATE_VERBS = tuple(tuple(p.split("/")) for p in (
    "bakes/bake paints/paint sells/sell prints/print plants/plant collects/collect knits/knit "
    "folds/fold carves/carve repairs/repair packs/pack sorts/sort stitches/stitch "
    "polishes/polish delivers/deliver labels/label glues/glue builds/build washes/wash "
    "frames/frame weaves/weave sketches/sketch photographs/photograph wraps/wrap "
    "counts/count").split())
BUY_VERBS = ("buys", "orders", "picks up", "gets", "chooses", "rents", "trades for", "wins",
             "finds", "borrows")
APIECE = ("each", "apiece", "a piece", "per item", "for one")
MOVE_VERBS = tuple(tuple(p.split("/")) for p in (
    "walks/walk jogs/jog drives/drive cycles/cycle rides/ride sails/sail rows/row flies/fly "
    "skates/skate hikes/hike paddles/paddle swims/swim").split())
DIRECTIONS = ("north", "south", "east", "west", "northeast", "northwest", "southeast",
              "southwest", "uphill", "downhill", "along the river", "across the valley")
PERIODS = ("minute", "hour", "day", "week", "month")
SURFACES = ("floor", "roof", "garden", "courtyard", "lawn", "pond", "stage", "parking lot",
            "playground", "field", "patio", "mural")
SHAPES = ("rectangle <3-40> by <3-40> meters", "square with side <2-30> feet",
          "circle of radius <2-20> yards", "right triangle with legs <3-30> and <3-30> inches",
          "trapezoid with bases <3-20> and <4-30> cm and height <2-15> cm",
          "parallelogram with base <4-50> feet and height <3-20> feet")
EARN_VERBS = ("earns", "gets", "is paid", "receives", "makes", "collects")
JOBS = ("sold", "delivered", "repaired", "painted", "packed", "sorted", "cleaned", "wrapped")
EVENTS = ("concert", "lecture", "puppet show", "chess match", "film", "parade", "auction",
          "race", "quiz night", "play", "dance class", "magic show")
SHARE_VERBS = ("shares", "splits", "divides", "gives away")
HOBBIES = ("collects {obj}", "plays the violin at the {place}", "runs the {place2}",
           "grows {obj3}", "studies maps of {town}", "trains for the {month} race",
           "restores {adj} {obj2}", "teaches at the {place2}")
FAMILIES: tuple[tuple[str, str], ...] = (
    ("{name} {rate_verb} <3-60> {adj} {obj} every {period} at the {place}.",
     "How many {obj} does {name} {rate_base} in <2-12> {period}s?"),
    ("{name2} {buy_verb} <2-40> {adj2} {obj2} for $<2-30> {apiece} at the {place2} in "
     "{town}.", "How much does {name2} spend on {obj2}?"),
    ("A {adj} {container} in {name}'s {structure} holds <2-20> {color} {obj3} and <2-20> "
     "{color2} {obj3}.", "What fraction of the {obj3} in the {container} are {color}?"),
    ("{name3} {move_verb} <2-40> {unit} {direction} from the {place} to {town2}.",
     "How long does {name3} take to {move_base} back at <2-20> {unit} per hour?"),
    ("The {adj3} {surface} of the {place2} is a {shape}.",
     "What is the area of the {surface}?"),
    ("{name} {earn_verb} $<5-60> for every {adj2} {obj2} {job} at the {place}.",
     "How much does {name} earn for <3-90> {obj2}?"),
    ("The {event} at the {adj} {place} starts at <1-11>:<10-59> and lasts <20-180> minutes.",
     "When does the {event} end?"),
    ("In {name2}'s {adj2} {container}, the ratio of {color} {obj} to {color2} {obj} is "
     "<1-9>:<1-9>.", "If there are <10-200> {obj} in the {container}, how many are {color2}?"),
    ("{name3} {share_verb} <frac> of the {adj3} {obj3} with {name} and keeps the rest for the "
     "{place2}.", "What fraction of the {obj3} does {name3} keep?"),
    ("{name} is <2-60> years [older|younger] than {name2}, who {hobby}.",
     "How old is {name2} if {name} is <20-90>?"),
)
