"""The fixed inputs of a precision measurement (precision.py), shipped with the code so every
machine measures the same thing offline: short prompts to decode from, and a small reference
text (plain English prose written for this project) to score perplexity on."""

DECODE_PROMPTS = (
    "The capital of France is",
    "Write one sentence about the sea:",
    "A short list of fruits: apples,",
    "Explain in simple words why the sky is blue.",
)

REFERENCE_TEXTS = (
    "The river starts high in the mountains, where snow melts in the spring and runs down through narrow "
    "valleys. By the time it reaches the plain it is wide and slow, and towns have grown along both banks. "
    "Farmers use its water for their fields, and boats carry grain and timber down to the sea.",
    "A good recipe lists its ingredients in the order they are used. First, warm the oven. Then mix the "
    "flour, sugar and salt in a large bowl, add the eggs one at a time, and stir until the batter is smooth. "
    "Pour it into a buttered tin and bake it for about forty minutes, until the top is golden.",
    "Computers store numbers in binary, a system with only two digits, zero and one. Each digit is called a "
    "bit, and eight bits make a byte. Larger numbers need more bits, and numbers with a fractional part are "
    "stored in a floating point format that keeps a fixed number of significant digits.",
    "The library opens at nine in the morning and closes at six in the evening. Visitors may borrow up to "
    "five books at a time for three weeks. Books can be renewed once, online or at the front desk, unless "
    "another reader has reserved them.",
    "In the evening the wind dropped and the sky cleared. The children ran down to the beach to watch the "
    "sun set over the water, while their parents packed the baskets and folded the chairs. By the time they "
    "walked home, the first stars had appeared above the hills.",
    "Regular exercise helps the heart and the lungs work better. Walking, swimming and cycling are good "
    "choices for most people, and even half an hour a day makes a difference. It is best to start slowly "
    "and to rest when the body feels tired.",
)
