"""The held-out zoo prompts (not a test module): hard-coded copies of Wikipedia openings whose
titles `split_of(title, "wiki")` puts in the *test* split (tests/test_zoo.py checks it), so nothing
the zoo models were trained on is used to judge them. `HELDOUT`: whole openings; `PROMPTS`: first
sentences, the prompts of the zoo drafters' tau floors.

Imports nothing: the child processes of tests/test_equality.py (tests/rounding_gap.py,
tests/reduced_precision.py) import only specjax and these prompts.
"""

# Held-out (test split) wiki article openings: (title, text).
HELDOUT = [
    ("Eiffel Tower", "The Eiffel Tower is a lattice tower on the Champ de Mars in Paris, France. It is named after "
     "the engineer Gustave Eiffel, whose company designed and built the tower from 1887 to 1889."),
    ("Heavy metal music", "Heavy metal is a genre of rock music that developed in the late 1960s and early 1970s, "
     "largely in the United Kingdom and United States. With roots in blues rock, psychedelic rock and acid rock, "
     "heavy metal bands developed a thick, monumental sound characterized by distorted guitars, extended guitar "
     "solos, emphatic beats and loudness."),
    ("Metamorphoses", "The Metamorphoses is a Latin narrative poem from 8 CE by the Roman poet Ovid. It is considered "
     "his magnum opus. The poem chronicles the history of the world from its creation to the deification of Julius "
     "Caesar in a mythico-historical framework comprising over 250 myths, 15 books, and 11,995 lines."),
    ("Palace of Versailles", "The Palace of Versailles is a château and historic monument in Versailles in the "
     "Yvelines department of France, southwest of Paris. It served as the principal residence of the French kings "
     "Louis XIV, Louis XV, and Louis XVI."),
]
# Held-out wiki prompts (first sentences of test-split openings).
PROMPTS = [
    ("Guitar", "The guitar is a stringed musical instrument that is usually fretted and typically has six or twelve "
     "strings."),
    ("Anime", "Anime  is animation originating from Japan."),
    ("Contemporary art", "Contemporary art is generally art created from the 1970s onwards."),
    ("Paradise Lost", "Paradise Lost is an epic poem in blank verse by the English poet John Milton (1608–1674)."),
    ("Music video", "A music video is a video that integrates a song or an album with imagery that is produced for "
     "promotional or musical artistic purposes."),
    ("Mirror (1975 film)", "Mirror is a 1975 Soviet avant-garde drama film directed by Andrei Tarkovsky and written "
     "by Tarkovsky and Aleksandr Misharin."),
]
