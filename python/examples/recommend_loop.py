import os
from o3m import APClient

client = APClient(config=os.environ["O3M_FED_CONF"], as_="client")  # as o3m-cli --config F --as client
items = [f"i{k}" for k in range(10)]
for t in range(40):
    rec = client.recommend(f"u{t % 20}", items)  # the federation scores every item
    clicked = 1.0 if rec.item in ("i3", "i7") else 0.0  # your users' feedback here
    client.reward(rec.decision, clicked)
print(client.stats())
client.close()
