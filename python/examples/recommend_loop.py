import argparse
from o3m import APClient, O3MError

# By default the README's quickstart: fed.conf and its [client frontend] (o3m-cli --as frontend).
ap = argparse.ArgumentParser(description="40 recommendations, each rewarded")
ap.add_argument("--config", default="fed.conf", help="the federation config (default: fed.conf)")
ap.add_argument("--as", dest="as_", default="frontend", help="the [client NAME] to call as (default: frontend)")
args = ap.parse_args()
try:
    client = APClient(config=args.config, as_=args.as_)
except O3MError as e:
    raise SystemExit(f"recommend_loop: {e}")
items, clicks = [f"i{k}" for k in range(10)], 0
for t in range(40):
    rec = client.recommend(f"u{t % 20}", items)  # the federation scores every item
    clicked = 1.0 if int(rec.item[1:]) % 2 == 0 else 0.0  # your users' feedback on rec.item here
    client.reward(rec.decision, clicked)  # rewards what was recommended, so the model learns
    clicks += clicked
print(f"clicks={clicks:.0f}", client.stats())
client.close()
