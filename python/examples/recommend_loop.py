import os
from o3m import APClient

client = APClient(config=os.environ["O3M_FED_CONF"], as_="client")  # as o3m-cli --config F --as client
items, clicks = [f"i{k}" for k in range(10)], 0
for t in range(40):
    rec = client.recommend(f"u{t % 20}", items)  # the federation scores every item
    clicked = 1.0 if int(rec.item[1:]) % 2 == 0 else 0.0  # your users' feedback on rec.item here
    client.reward(rec.decision, clicked)  # rewards what was recommended, so the model learns
    clicks += clicked
print(f"clicks={clicks:.0f}", client.stats())
client.close()
