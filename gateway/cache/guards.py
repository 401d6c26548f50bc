"""Near-miss guards for the semantic cache, and the exact-tier text normalization.

Sentence embeddings put "weather in Paris" and "weather in London", or "how do I enable X"
and "how do I not enable X", very close together, yet each needs its own answer. These checks
run on the top candidate *after* the similarity threshold: they compare the small facts that
an answer depends on (numbers, units, dates, negation, named entities, code identifiers) and
veto the hit when one differs. Pure Python with precompiled patterns and a per-text feature
cache, so a check costs tens of microseconds; no model, no data files. The lexicons are short,
hand-written lists of common names; an entity they miss is still caught by capitalization
(English) or by a character diff (Chinese).

Precision comes first: when unsure, a guard fires and the request goes upstream, which costs
one model call; a wrong hit serves a wrong answer.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from difflib import SequenceMatcher
from functools import lru_cache

__all__ = ["content_difference", "near_miss", "normalize"]

# ---------------------------------------------------------------- normalize

_FENCE_RE = re.compile(r"(```.*?```)", re.S)
_INLINE_CODE_RE = re.compile(r"(`[^`\n]+`)")
_WS_RE = re.compile(r"\s+")
# Trailing sentence punctuation only; "5!" (a factorial) keeps its "!".
_TRAIL_RE = re.compile(r"(?:[\s?.,~\u2026\u3002]|(?<!\d)!)+$")  # full-width ?,! folded by NFKC


def normalize(text: str) -> str:
    """Key for the exact tier: texts with equal keys must deserve the same answer.

    NFKC (full-width to half-width), casefold, whitespace collapsed, trailing ?/./! dropped.
    Code is kept as written: fenced blocks verbatim (indentation is meaning in Python) and
    inline `code` with its case (getName and getname are different identifiers).
    """
    text = unicodedata.normalize("NFKC", text).strip()
    parts = _FENCE_RE.split(text)
    out: list[str] = []
    for i, part in enumerate(parts):
        if i % 2:  # a fenced code block
            out.append(part)
            continue
        for j, piece in enumerate(_INLINE_CODE_RE.split(part)):
            out.append(piece if j % 2 else _WS_RE.sub(" ", piece.casefold()))
    joined = "".join(out).strip()
    if not joined.endswith("```"):
        joined = _TRAIL_RE.sub("", joined)
    return joined


# ---------------------------------------------------------------- lexicons (hand-written)


def _words(block: str) -> list[str]:
    return block.split()


_ZH_DIGITS = {"零": 0, "\u3007": 0, "一": 1, "二": 2, "两": 2, "俩": 2, "三": 3, "四": 4, "五": 5,
              "六": 6, "七": 7, "八": 8, "九": 9}
_ZH_SMALL = {"十": 10, "百": 100, "千": 1000}
_ZH_BIG = {"万": 10_000, "亿": 100_000_000}
_ZH_NUM_CHARS = "".join([*_ZH_DIGITS, *_ZH_SMALL, *_ZH_BIG])

_EN_NUM_WORDS = {
    "zero": 0, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14,
    "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19,
    "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70,
    "eighty": 80, "ninety": 90, "dozen": 12, "twenties": 20, "thirties": 30, "forties": 40,
    "fifties": 50, "sixties": 60, "seventies": 70, "eighties": 80, "nineties": 90,
}
_EN_SCALES = {"hundred": 100, "thousand": 1000, "million": 10**6, "billion": 10**9,
              "trillion": 10**12}
_EN_ORDINALS = {"second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7,
                "eighth": 8, "ninth": 9, "tenth": 10, "eleventh": 11, "twelfth": 12}
# "one", "a", "first", "一" often mean "a" / "at first": a 1 seen only in words is soft.
_SOFT_ONE_WORDS = {"one", "first"}
_NUMBER_WORDS = frozenset([*_EN_NUM_WORDS, *_EN_SCALES, *_EN_ORDINALS, *_SOFT_ONE_WORDS])

# canonical unit -> spellings. Long or unambiguous spellings count anywhere in the text;
# the short ones in _UNIT_SHORT only right after a number ("5 m", "3s", "10 in").
_UNITS: dict[str, tuple[str, ...]] = {
    "km": ("km", "kms", "kilometer", "kilometers", "kilometre", "kilometres", "公里", "千米"),
    "mi": ("mile", "miles", "英里"),
    "m": ("meter", "meters", "metre", "metres", "米"),
    "cm": ("cm", "centimeter", "centimeters", "centimetre", "centimetres", "厘米"),
    "mm": ("mm", "millimeter", "millimeters", "millimetre", "millimetres", "毫米"),
    "in": ("inch", "inches", "英寸"),
    "ft": ("ft", "foot", "feet", "英尺"),
    "yd": ("yard", "yards", "码"),
    "kg": ("kg", "kgs", "kilogram", "kilograms", "kilo", "kilos", "公斤", "千克"),
    "g": ("gram", "grams", "克"),
    "lb": ("lb", "lbs", "pound", "pounds", "磅"),
    "oz": ("oz", "ounce", "ounces", "盎司"),
    "jin": ("斤",),
    "t": ("ton", "tons", "tonne", "tonnes", "吨"),
    "l": ("liter", "liters", "litre", "litres", "升"),
    "ml": ("ml", "milliliter", "milliliters", "millilitre", "millilitres", "毫升"),
    "gal": ("gallon", "gallons", "加仑"),
    "cup": ("cup", "cups"),
    "tbsp": ("tbsp", "tablespoon", "tablespoons"),
    "tsp": ("tsp", "teaspoon", "teaspoons"),
    "c": ("°c", "celsius", "centigrade", "摄氏度", "摄氏"),
    "f": ("°f", "fahrenheit", "华氏度", "华氏"),
    "k": ("kelvin",),
    "deg": ("°", "degree", "degrees", "度"),
    "%": ("%", "percent", "per cent", "percentage", "百分之"),
    "s": ("sec", "secs", "seconds", "秒", "秒钟"),
    "min": ("mins", "minute", "minutes", "分钟"),
    "h": ("hr", "hrs", "hour", "hours", "小时", "个小时", "钟头"),
    "day": ("day", "days", "天", "日"),
    "week": ("week", "weeks", "周", "星期", "个星期", "礼拜", "个礼拜"),
    "month": ("month", "months", "个月"),
    "year": ("year", "years", "yr", "yrs", "年"),
    "b": ("byte", "bytes"),
    "kb": ("kb", "kilobyte", "kilobytes"),
    "mb": ("mb", "megabyte", "megabytes", "兆"),
    "gb": ("gb", "gigabyte", "gigabytes"),
    "tb": ("tb", "terabyte", "terabytes"),
    "bit": ("bit", "bits"),
    "mbps": ("mbps",),
    "hz": ("hz",),
    "mhz": ("mhz",),
    "ghz": ("ghz",),
    "w": ("watt", "watts", "瓦"),
    "kw": ("kw", "kilowatt", "kilowatts", "千瓦"),
    "kwh": ("kwh",),
    "v": ("volt", "volts", "伏"),
    "mah": ("mah", "毫安"),
    "mph": ("mph",),
    "kmh": ("km/h", "kph", "kmph"),
    "kcal": ("kcal", "calorie", "calories", "卡路里", "大卡"),
    "px": ("px", "pixel", "pixels", "像素"),
    "usd": ("$", "usd", "dollar", "dollars", "美元", "美金"),
    "eur": ("€", "eur", "euro", "euros", "欧元"),
    "gbp": ("£", "gbp", "英镑"),
    "jpy": ("jpy", "yen", "日元"),
    "cny": ("¥", "rmb", "cny", "yuan", "元", "块", "块钱", "人民币"),
    "inr": ("₹", "inr", "rupee", "rupees", "rs", "卢比"),
    "hkd": ("hkd", "港币", "港元"),
    "btc": ("btc", "bitcoin", "bitcoins", "比特币"),
}
_UNIT_SHORT = {"m", "g", "s", "h", "l", "t", "b", "v", "w", "c", "f", "min",
               "bit", "bits", "米", "克", "升", "吨", "度", "天", "日", "周", "年", "元",
               "块", "秒", "兆", "瓦", "伏", "码", "斤", "星期", "礼拜", "rs", "day", "days",
               "week", "weeks", "month", "months", "year", "years", "yr", "yrs", "hour",
               "hours", "minute", "minutes", "mins", "sec", "secs", "cup", "cups"}

_EN_NEGATIONS = {"not", "no", "never", "cannot", "without", "none", "nobody", "nothing",
                 "nowhere", "neither", "nor", "unable", "impossible", "dont", "doesnt",
                 "didnt", "cant", "wont", "isnt", "arent", "wasnt", "werent", "shouldnt",
                 "wouldnt", "couldnt", "havent", "hasnt", "hadnt", "aint", "mustnt"}

# Antonyms that an embedding barely separates. Pairs of words, each a canonical key.
_EN_ANTONYMS = [
    ("enable", "disable"), ("enabled", "disabled"), ("increase", "decrease"),
    ("max", "min"), ("maximum", "minimum"), ("before", "after"), ("more", "less"),
    ("most", "least"), ("best", "worst"), ("better", "worse"), ("buy", "sell"),
    ("win", "lose"), ("pros", "cons"), ("advantage", "disadvantage"), ("upload", "download"),
    ("import", "export"), ("start", "stop"), ("open", "close"), ("add", "remove"),
    ("include", "exclude"), ("encrypt", "decrypt"), ("encode", "decode"), ("login", "logout"),
    ("push", "pull"), ("inside", "outside"), ("above", "below"), ("high", "low"),
    ("higher", "lower"), ("highest", "lowest"), ("fast", "slow"), ("faster", "slower"),
    ("cheap", "expensive"), ("hot", "cold"), ("true", "false"), ("left", "right"),
    ("north", "south"), ("east", "west"), ("positive", "negative"), ("love", "hate"),
    ("accept", "reject"), ("allow", "deny"), ("allow", "block"), ("show", "hide"),
    ("visible", "hidden"), ("connect", "disconnect"), ("lock", "unlock"), ("big", "small"),
    ("bigger", "smaller"), ("biggest", "smallest"), ("large", "small"),
    ("largest", "smallest"), ("long", "short"), ("longer", "shorter"), ("old", "new"),
    ("older", "newer"), ("oldest", "newest"), ("first", "last"), ("early", "late"),
    ("earliest", "latest"), ("rich", "poor"), ("strong", "weak"), ("heavy", "light"),
    ("easy", "hard"), ("easiest", "hardest"), ("good", "bad"), ("men", "women"),
    ("male", "female"), ("boy", "girl"), ("husband", "wife"), ("import", "export"),
    ("ascending", "descending"), ("asc", "desc"), ("sync", "async"), ("synchronous",
    "asynchronous"), ("client", "server"), ("frontend", "backend"), ("input", "output"),
    ("read", "write"), ("get", "set"), ("send", "receive"), ("up", "down"), ("in", "out"),
    ("on", "off"), ("yes", "no"), ("always", "never"), ("everyone", "nobody"),
    ("all", "none"), ("legal", "illegal"), ("gain", "lose"), ("gain", "loss"),
    ("profit", "loss"), ("income", "expense"), ("similar", "different"), ("same", "different"),
    ("similar", "differ"), ("similarity", "difference"), ("give", "receive"),
    ("given", "received"), ("gave", "received"), ("fully", "partially"), ("full", "partial"),
    ("credit", "debit"), ("deposit", "withdraw"),
    ("import", "export"), ("uppercase", "lowercase"), ("horizontal", "vertical"),
    ("horizontally", "vertically"), ("row", "column"), ("rows", "columns"),
]
_EN_NEG_PREFIXES = ("un", "dis", "in", "im", "il", "ir", "non", "non-", "de", "anti")

_ZH_ANTONYMS = [
    ("打开", "关闭"), ("开启", "关闭"), ("开通", "关闭"), ("开通", "取消"), ("开启", "禁用"),
    ("启用", "禁用"), ("增加", "减少"), ("提高", "降低"), ("提升", "降低"), ("上升", "下降"),
    ("上涨", "下跌"), ("买入", "卖出"), ("购买", "出售"), ("最大", "最小"), ("最多", "最少"),
    ("最高", "最低"), ("最好", "最差"), ("最快", "最慢"), ("最贵", "最便宜"), ("优点", "缺点"),
    ("好处", "坏处"), ("之前", "之后"), ("以前", "以后"), ("上传", "下载"), ("登录", "退出"),
    ("登录", "注销"), ("加入", "退出"), ("安装", "卸载"), ("开始", "结束"), ("成功", "失败"),
    ("正确", "错误"), ("允许", "禁止"), ("显示", "隐藏"), ("男", "女"), ("加密", "解密"),
    ("导入", "导出"), ("收入", "支出"), ("存款", "取款"), ("存钱", "取钱"), ("充值", "提现"),
    ("升级", "降级"), ("绑定", "解绑"), ("冻结", "解冻"), ("锁定", "解锁"), ("借", "还"),
    ("早上", "晚上"), ("上午", "下午"), ("白天", "晚上"), ("冷", "热"), ("涨", "跌"),
    ("多", "少"), ("大", "小"), ("高", "低"), ("快", "慢"), ("长", "短"), ("贵", "便宜"),
    ("胖", "瘦"), ("新", "旧"), ("前", "后"), ("左", "右"), ("东", "西"), ("南", "北"),
]

# Chinese characters that carry grammar, not content: a diff made only of these is a
# paraphrase ("怎么" / "如何", "可以" / "能", filler 请/一下/吗).
_ZH_FUNCTION = set(
    "的了吗呢吧啊呀哦嘛么哈啦呗哇噢嗯"  # particles
    "请问一下我你您他她它们自己咱"  # pronouns, politeness
    "是在有和与跟及或而且并都也就还又才很太挺更真好非常特别十分比较"  # copula, adverbs
    "要想会能可以该应得需地着过把被给让对向从于为因所"  # modals, prepositions
    "这那个些此其每各什怎如何样啥哪谁几么多少"  # question words, demonstratives
    "吗呢咋为啥么到弄搞知道告诉问题情况"  # light verbs, "what's the situation"
    "一下下子点儿"
    "不没无未"  # negation has its own check
)
_ZH_PERSONS = frozenset("我你您他她它")
# Who a question is about: "men" vs "women", "his wife" vs "her husband", 男人 vs 女人.
_EN_GENDER = {
    **dict.fromkeys(_words("""he him his himself man men boy boys guy guys male males husband
                    husbands boyfriend boyfriends father son sons brother"""), "m"),
    **dict.fromkeys(_words("""she her hers herself woman women girl girls female females wife
                    wives girlfriend girlfriends mother daughter daughters sister"""), "f"),
}
_ZH_GENDER_RE = re.compile("(男|老公|丈夫|儿子)|(女|老婆|妻子)")
_ZH_QUESTIONS = ("怎么样", "怎么办", "怎样", "怎么", "如何", "什么", "为什么", "为啥", "咋")

# Entity lexicons: common, unambiguous names. Capitalization catches the rest in English.
_EN_ENTITIES = frozenset(_words("""
afghanistan albania algeria argentina armenia australia austria azerbaijan bangladesh belarus
belgium bolivia brazil bulgaria cambodia cameroon canada chile china colombia croatia cuba
cyprus czechia denmark ecuador egypt england estonia ethiopia finland france georgia germany
ghana greece hungary iceland india indonesia iran iraq ireland israel italy jamaica japan
kazakhstan kenya korea kuwait laos latvia lebanon libya lithuania luxembourg malaysia maldives
mexico mongolia morocco myanmar nepal netherlands holland nigeria norway pakistan palestine
panama peru philippines poland portugal qatar romania russia rwanda scotland serbia singapore
slovakia slovenia somalia spain sri lanka sudan sweden switzerland syria taiwan tanzania
thailand tunisia uganda ukraine uae uruguay uzbekistan venezuela vietnam wales yemen zambia
zimbabwe usa uk europe asia africa antarctica australia american british chinese french german
indian japanese korean russian spanish italian english hindi urdu bengali tamil telugu marathi
gujarati punjabi kannada malayalam arabic persian portuguese dutch swedish greek hebrew latin
turkish vietnamese thai mandarin cantonese polish ukrainian canadian mexican brazilian
pakistani african european asian london paris berlin madrid rome tokyo beijing shanghai delhi
mumbai bangalore bengaluru chennai kolkata hyderabad pune ahmedabad jaipur lucknow chandigarh
kerala goa punjab gujarat maharashtra karnataka bihar rajasthan moscow dubai istanbul cairo
sydney melbourne toronto vancouver montreal chicago boston seattle houston dallas atlanta miami
denver phoenix philadelphia detroit austin portland orlando vegas california texas florida ohio
virginia michigan georgia arizona colorado oregon nevada hawaii alaska manhattan brooklyn
hollywood amsterdam vienna prague budapest warsaw lisbon dublin edinburgh brussels zurich
geneva stockholm oslo copenhagen helsinki athens bangkok seoul singapore jakarta manila hanoi
karachi lahore dhaka kathmandu shenzhen guangzhou hongkong kong taipei osaka kyoto google
microsoft facebook netflix tesla samsung huawei xiaomi sony intel amd nvidia ibm oracle uber
lyft airbnb twitter instagram whatsapp snapchat tiktok youtube linkedin reddit quora wikipedia
spotify paypal alibaba tencent baidu flipkart paytm jio airtel vodafone infosys tcs wipro
accenture deloitte mckinsey goldman walmart starbucks mcdonalds coca cola pepsi nike adidas
toyota honda bmw audi mercedes ford ferrari boeing airbus disney marvel hbo pixar spacex openai
chatgpt gpt claude gemini bing yahoo gmail skype dropbox iphone ipad ipod macbook imac airpods
android ios macos linux ubuntu debian fedora centos unix playstation ps4 ps5 xbox nintendo
oneplus nokia motorola lenovo dell hp asus acer redmi oppo vivo realme python java javascript
typescript kotlin golang ruby php perl scala haskell matlab sql mysql postgresql postgres
mongodb redis sqlite docker kubernetes angular vue django nodejs tensorflow pytorch keras numpy
excel powerpoint photoshop git github gitlab aws azure gcp hadoop kafka nginx apache jquery
wordpress html css json xml yaml c++ c# .net trump obama clinton hillary biden modi putin
kejriwal gandhi nehru rahul musk zuckerberg bezos einstein newton darwin shakespeare hitler
napoleon lincoln washington jesus buddha muhammad krishna shiva harvard stanford mit oxford
cambridge yale princeton berkeley iit iim ucla nyu cornell columbia caltech gre gmat toefl
ielts upsc ssc hindu muslim christian islam christianity hinduism buddhism sikh jewish catholic
"""))

_ZH_ENTITIES = tuple(_words("""
北京 上海 天津 重庆 广州 深圳 杭州 南京 苏州 成都 武汉 西安 长沙 郑州 青岛 厦门 大连 沈阳
哈尔滨 长春 昆明 合肥 福州 济南 南昌 贵阳 南宁 太原 石家庄 兰州 乌鲁木齐 拉萨 呼和浩特 银川
西宁 海口 三亚 宁波 无锡 东莞 佛山 珠海 温州 香港 澳门 台湾 台北 河北 山西 辽宁 吉林 黑龙江
江苏 浙江 安徽 福建 江西 山东 河南 湖北 湖南 广东 海南 四川 贵州 云南 陕西 甘肃 青海 内蒙古
广西 西藏 宁夏 新疆 中国 美国 英国 法国 德国 日本 韩国 朝鲜 俄罗斯 印度 加拿大 澳大利亚
意大利 西班牙 葡萄牙 巴西 墨西哥 新加坡 泰国 越南 马来西亚 印尼 菲律宾 荷兰 瑞士 瑞典 挪威
芬兰 丹麦 埃及 南非 以色列 伊朗 土耳其 希腊 新西兰 阿根廷 欧洲 亚洲 非洲 美洲 纽约 伦敦 巴黎
东京 首尔 柏林 莫斯科 洛杉矶 旧金山 悉尼 华为 小米 苹果 三星 联想 京东 淘宝 天猫 支付宝 微信
花呗 借呗 余额宝 网商贷 蚂蚁 抖音 快手 美团 饿了么 滴滴 百度 腾讯 阿里 网易 微博 拼多多 字节
头条 知乎 豆瓣 携程 特斯拉 比亚迪 丰田 本田 宝马 奔驰 奥迪 大众 谷歌 微软 亚马逊 脸书 英伟达
英特尔 索尼 任天堂 诺基亚 魅族 中兴 工行 建行 农行 中行 招行 工商银行 建设银行 农业银行
中国银行 招商银行 交通银行 邮政 平安 人保 微粒贷 京东白条 信用卡 储蓄卡 王者荣耀 英雄联盟
原神 我的世界 安卓 鸿蒙 毛泽东 邓小平 习近平 孔子 孟子 老子 庄子 李白 杜甫 苏轼 鲁迅 秦始皇
刘备 曹操 诸葛亮 孙悟空 唐僧 猪八戒 清华 北大 复旦 浙大 长江 黄河 泰山 黄山 故宫 长城
"""))

# A people and its country are one name for matching: "Indians" ~ "India".
_DEMONYMS = {
    "indian": "india", "chinese": "china", "american": "usa", "british": "uk",
    "french": "france", "german": "germany", "japanese": "japan", "korean": "korea",
    "russian": "russia", "spanish": "spain", "italian": "italy", "canadian": "canada",
    "mexican": "mexico", "brazilian": "brazil", "pakistani": "pakistan", "african": "africa",
    "european": "europe", "asian": "asia", "australian": "australia", "israeli": "israel",
    "iranian": "iran", "turkish": "turkey", "greek": "greece", "dutch": "netherlands",
    "swedish": "sweden", "filipino": "philippines", "vietnamese": "vietnam",
    "thai": "thailand", "egyptian": "egypt", "nigerian": "nigeria", "nepali": "nepal",
    "bangladeshi": "bangladesh", "irish": "ireland", "polish": "poland",
    "portuguese": "portugal", "ukrainian": "ukraine", "swiss": "switzerland",
}

# Capitalized words that are not names (sentence-initial words are skipped anyway).
_CAP_STOP = frozenset(_words("""
i i'm i've i'd i'll im ive ok okay mr mrs ms dr sir madam please hi hello hey thanks thank
dear god lord q a what how why who when where which is are do does can could should would
will the an in on of for to and or but if
"""))

_EN_STOP = frozenset(_words("""
a an the is are was were be been being am do does did doing have has had having can could
should would will shall may might must i me my mine myself we us our you your yours he him
his she her it its they them their this that these those there here what which who whom
whose why how when where whats hows whys wheres whos to of in on at by for with from about as
into onto over under than then so and or but if because while also too very really just
quite some any each every all both either such only own same other another more most much
many few lot lots get got getting make makes made go going way ways thing things one ones
someone something anyone anything people person best good better need needs want wants like
know tell please possible possibly actually exactly ever else kind sort use used using
"""))

# Aliases folded before entity comparison, only when a cue is in the text (it rarely is).
_ALIAS_CUE_RE = re.compile(r"united|u\.[sk]\.|america|britain|nyc|york city|hong kong")
_ALIASES = [
    (re.compile(r"\b(?:united states of america|united states|u\.s\.a\b\.?|u\.s\.|america)(?!n)",
                re.I), "USA"),
    (re.compile(r"\bUS\b"), "USA"),
    (re.compile(r"\b(?:united kingdom|great britain|britain|u\.k\.)", re.I), "UK"),
    (re.compile(r"\b(?:new york city|nyc)\b", re.I), "New York"),
    (re.compile(r"\bhong kong\b", re.I), "Hongkong"),
]


# ---------------------------------------------------------------- patterns


def _alternation(words: list[str]) -> str:
    return "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))


_UNIT_OF = {spelling: canon for canon, spellings in _UNITS.items() for spelling in spellings}
# A unit right after a number: "5 km", "5km", "五公里", "3.5%", "20°C", "10 个月".
# The token right after a number: a word, a symbol or up to three CJK characters, looked up
# in _UNIT_OF ("5 km", "5km", "五公里", "3.5%", "20°C", "10 个月", "3 and half days" no).
_AFTER_RE = re.compile(r"\s?([a-z]+(?:/[a-z])?|°[cf]?|[%$€£¥₹]|[\u3400-\u9fff]{1,3})")
# Spellings that name a unit wherever they stand ("in miles", "多少公里").
_UNIT_WORDS = {u: c for u, c in _UNIT_OF.items() if u not in _UNIT_SHORT and u.isalpha()
               and u.isascii()}
_ZH_UNIT_ANY_RE = re.compile(_alternation(
    [u for u in _UNIT_OF if u not in _UNIT_SHORT and not u.isascii() and u.isalpha()]))
_UNIT_SYMBOL_RE = re.compile(r"[%$€£¥₹]|°[cf]?")
_HOW_MANY_UNIT_RE = re.compile(
    r"\bhow (?:many|much|long)(?: \w+)? (seconds|minutes|hours|days|weeks|months|years)\b|"
    r"(?:多少|几)(?:个)?(秒|分钟|小时|天|周|星期|月|年)"
)
_CURRENCY_PREFIX_RE = re.compile(r"([$€£¥₹]|\brs\b\.?|\binr\b)\s?(?=\d)")
_SECOND_UNIT_RE = re.compile(r"(?<=\d)\s*seconds?\b|\b(?:a|one|per|split) seconds?\b")

_NUM_RE = re.compile(r"(?<![\d.])(\d{1,3}(?:,\d{3})+(?![\d,])|\d+)((?:\.\d+)+)?")
_ZH_NUM_RE = re.compile(f"[{_ZH_NUM_CHARS}]+(?:点[{''.join(_ZH_DIGITS)}]+)?")
# Words that contain numeral characters without being numbers (十分 = very, 百度 = Baidu).
_ZH_NOT_NUMBER_RE = re.compile(
    "十分|千万(?![元人美亿])|万万|万一|百度|百科|百货|三星|一下|一些|一样|一起|一直|一般|一定|"
    "一切|统一|唯一|一旦|一致|之一|一会|一点(?![零一二三四五六七八九])|一边|一共|一次性|"
    "一口气|不一|第一时间|一手|二手|三亚|九寨|四川|万能|千万别|一路"
)
_ZH_PERCENT_RE = re.compile(f"百分之([{_ZH_NUM_CHARS}]+|\\d+(?:\\.\\d+)?)")
_WORD_RE = re.compile(r"[a-z]+|\d+")  # one pass over the casefolded text
_DIGIT_RE = re.compile(r"\d")

_MONTHS = {m: i for i, names in enumerate([
    ("january", "jan"), ("february", "feb"), ("march",), ("april", "apr"), ("may",),
    ("june", "jun"), ("july", "jul"), ("august", "aug"), ("september", "sept"),
    ("october", "oct"), ("november", "nov"), ("december",)], 1) for m in names}
_WEEKDAYS = {d: i for i, names in enumerate([
    ("monday",), ("tuesday", "tues"), ("wednesday",), ("thursday", "thurs"),
    ("friday",), ("saturday",), ("sunday",)], 1) for d in names}
_EN_RELATIVE_DAYS = {"today": "d0", "tonight": "d0", "tomorrow": "d+1", "yesterday": "d-1"}
_EN_RELATIVE_SHIFT = {"this": "0", "next": "+1", "last": "-1", "coming": "+1", "past": "-1"}
_EN_PERIODS = {"week", "month", "year", "weekend", "quarter"}
_DATE_WORDS = frozenset([*_MONTHS, *_WEEKDAYS, *(d + "s" for d in _WEEKDAYS),
                         *_EN_RELATIVE_DAYS, *_EN_PERIODS])
_YEAR_RE = re.compile(r"(?<!\d)(?:19|20)\d\d(?!\d)")
_ZH_RELATIVE = {
    "今天": "d0", "今日": "d0", "今晚": "d0", "明天": "d+1", "明日": "d+1", "昨天": "d-1",
    "昨日": "d-1", "后天": "d+2", "前天": "d-2", "大后天": "d+3", "大前天": "d-3",
    "本周": "week0", "这周": "week0", "这个星期": "week0", "下周": "week+1",
    "下个星期": "week+1", "上周": "week-1", "上个星期": "week-1", "本月": "month0",
    "这个月": "month0", "下个月": "month+1", "上个月": "month-1", "今年": "year0",
    "明年": "year+1", "去年": "year-1", "前年": "year-2", "后年": "year+2", "周末": "weekend0",
}
_NUMERIC_DATE_RE = re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b|\b(\d{1,2})/(\d{1,2})/(\d{2,4})\b")
_ZH_NUM_OR_DIGITS = f"(?:\\d+|[{_ZH_NUM_CHARS}]+)"
_ZH_DATE_RE = re.compile(
    f"({_ZH_NUM_OR_DIGITS})年(?!级|代|龄|纪|轻|底|初|中|终|度|货|会|利|限|费|息)|"
    f"({_ZH_NUM_OR_DIGITS})月(?:份)?|({_ZH_NUM_OR_DIGITS})(?:日|号)|"
    "(?:周|星期|礼拜)([一二三四五六日天末])|"
    f"({_alternation(list(_ZH_RELATIVE))})"
)

_EN_NEG_RE = re.compile(r"n't\b")  # curly apostrophes are folded first
_EN_NOT_QUESTION_RE = re.compile(r"\bor not\b|\bor why not\b")
_ZH_A_NOT_A_RE = re.compile(r"([^还])[不没]\1|可不可以|了没有?(?=[?。,!\s]|$)")
# Compounds with a negation character that do not negate (非常 = very, 别人 = others).
_ZH_NOT_NEGATION_RE = re.compile(
    "不过|不错|不仅|不但|不久|不断|不少|不如|不管|不论|不然|差不多|不好意思|对不起|了不起|"
    "不得不|不一定|非常|非得|除非|是非|非洲|无论|否则|是否|能否|可否|与否|无聊|无线|无人机|无限|"
    "未来|未成年|别人|别的|特别|区别|分别|级别|类别|识别|告别|性别|个别|差别|辨别|鉴别|离别|"
    "莫名|没关系|不客气"
)
_ZH_NEG_CHARS = frozenset("不没沒无無未别勿莫非否")

# (cue characters, pattern): a pattern runs only when one of its cues is in the text.
# re.ASCII: a CJK character next to an identifier is a boundary ("getUserName方法").
_IDENT_RULES: list[tuple[str, re.Pattern[str]]] = [
    (cue, re.compile(pattern, re.ASCII)) for cue, pattern in [
        ("`", r"`([^`\n]+)`"),
        ("(", r"(?<![\w.])([A-Za-z_][\w.]*)(?=\()"),  # a call: foo_bar(, os.path.join(
        ("_", r"\b([A-Za-z0-9]*[A-Za-z][A-Za-z0-9]*(?:_\w+)+|_+[A-Za-z]\w*)\b"),  # snake_case
        # dotted names and file names: os.path, config.yaml, Node.js (not e.g. / U.S.)
        (".", r"(?<![\w.])([A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*)+)(?![\w(-]|\.\w)"),
        (".", r"(?<![\w.])(\.[a-z][a-z0-9]{1,5})\b"),  # extensions: .py, .tar
        ("-", r"(?<![\w-])(--?[A-Za-z][\w-]*)"),  # command-line flags
        ("/", r"(?<!\S)((?:~|\.{1,2})?/[\w.-]+(?:/[\w.-]+)*/?)"),  # paths
        ("$", r"(\$[A-Za-z_]\w*)"),  # environment variables
    ]
]
_INNER_CAPITAL_RE = re.compile(r"\b([A-Za-z]*[a-z][A-Z][A-Za-z0-9]*)\b", re.ASCII)  # getName
_MIN_INNER_CAPITAL = 4  # kW, mAh, iOS are units and names, not identifiers
_SHORT_DOTTED_RE = re.compile(r"^(?:[A-Za-z]\.)+[A-Za-z]?$")  # e.g, i.e, U.S.A

_L = "A-Za-z\u00c0-\u024f"  # Latin letters, accented ones included
_TOKEN_RE = re.compile(f"[{_L}][{_L}0-9]*(?:['.&+#-][{_L}0-9]+)*[+#]*")
_SENTENCE_ENDS = frozenset('.?!:;"(\n\u201c\u3002')  # after NFKC
_CJK_RE = re.compile(r"[\u3400-\u9fff]")
_ASCII_LETTER_RE = re.compile(r"[A-Za-z]")
_UPPER_RE = re.compile(r"[A-Z]")
_ZH_DIFF_UNIT_RE = re.compile(r"[A-Za-z]+|[\u3400-\u9fff]")
# Joiners under which swapping two names keeps the meaning: "X and Y", "X vs Y", "X和Y".
_JOINER_RE = re.compile(
    r"\s*(?:,|&|/|、|和|与|跟|及|或者?|还是|and|or|vs\.?|versus)?\s*(?:the\s+)?"
)
# Directional frames: "convert X to Y", "from X to Y", "X better than Y", "X比Y", "X换成Y".
_EN_DIRECTION_CUE_RE = re.compile(
    r"\b(?:convert\w*|translat\w*|transform\w*|switch\w*|migrat\w*|mov\w*|transfer\w*|"
    r"chang\w*|from|fly|flights?|drive|travel\w*)\b")
_EN_DIRECTION_RE = re.compile(r"\b(than|into|to)\b")
_ZH_DIRECTION_RE = re.compile(
    r"(?<!对)比(?!较|赛|例|如|分|率)|换成|转成|变成|翻译成|转换成|转为|到"
)
_DIRECTION_WINDOW = 3
_LIST_WORDS = frozenset({"and", "or", "&", "vs", "versus"})
_NAME_PREPOSITIONS = frozenset({"in", "at", "near", "from", "to", "of", "into", "visit"})


# ---------------------------------------------------------------- features


@dataclass(frozen=True, slots=True)
class _Span:
    tokens: tuple[str, ...]  # stemmed, casefolded
    strong: bool
    start: int
    end: int

    @property
    def key(self) -> str:
        return " ".join(self.tokens)


@dataclass(frozen=True, slots=True)
class _Features:
    identifiers: frozenset[str]
    dates: frozenset[str]
    units: frozenset[str]
    unit_order: tuple[str, ...]
    quantities: frozenset[tuple[str, str]]
    numbers: frozenset[str]
    soft_numbers: frozenset[str]  # numbers seen only as "one" / "first" / "一"
    negations: int
    words: frozenset[str]  # casefolded, lightly stemmed tokens
    tokens: frozenset[str]  # casefolded tokens as written
    direction: tuple[frozenset[str], frozenset[str]] | None  # content words around "to"/"than"
    genders: tuple[str, ...]  # m/f of the people mentioned, in order, repeats collapsed
    entity_text: str  # the text the English spans point into (aliases folded)
    entity_spans: tuple[_Span, ...]
    zh_text: str  # casefolded text when it has CJK characters, else ""
    zh_entities: tuple[_Span, ...]
    zh_units: tuple[str, ...]  # CJK characters and ASCII words, for the diff


@lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    word = word.casefold()
    if not word.isascii():
        word = "".join(c for c in unicodedata.normalize("NFKD", word) if c.isascii())
    if word.endswith("'s"):
        word = word[:-2]
    if not word.isalpha():  # c++, node.js, don't: compare as written
        return word
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("es") and word[-3] in "sxz":
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def _canon_number(whole: str, frac: str | None) -> str:
    whole = whole.replace(",", "").lstrip("0") or "0"
    if not frac:
        return whole
    if frac.count(".") > 1:  # a version: 1.2.3
        return whole + frac
    digits = frac[1:]
    return whole if set(digits) == {"0"} else f"{whole}.{digits}"


def _zh_value(span: str) -> int:
    if all(c in _ZH_DIGITS for c in span):  # 二〇二三 -> 2023, digit by digit
        return int("".join(str(_ZH_DIGITS[c]) for c in span))
    total = section = num = 0
    for c in span:
        if c in _ZH_DIGITS:
            num = _ZH_DIGITS[c]
        elif c in _ZH_SMALL:
            section += (num or 1) * _ZH_SMALL[c]
            num = 0
        else:
            total += ((section + num) or 1) * _ZH_BIG[c]
            section = num = 0
    return total + section + num


def _zh_number(span: str) -> str:
    whole, _, frac = span.partition("点")
    value = str(_zh_value(whole))
    if frac:
        return value + "." + "".join(str(_ZH_DIGITS[c]) for c in frac)
    return value


def _as_number(token: str) -> str:
    return str(int(token)) if token.isdigit() else _zh_number(token)


def _extract_identifiers(text: str) -> frozenset[str]:
    found: set[str] = set()
    matches = [m.group(1) for cue, pattern in _IDENT_RULES if cue in text
               for m in pattern.finditer(text)]
    matches += [m for m in _INNER_CAPITAL_RE.findall(text) if len(m) >= _MIN_INNER_CAPITAL]
    for ident in matches:
        ident = ident.strip().rstrip(".").removesuffix("()")
        if ident and not _SHORT_DOTTED_RE.match(ident):
            found.add(ident.casefold())
    return frozenset(found)


def _extract_dates(low: str, words: list[str], has_cjk: bool) -> frozenset[str]:
    found: set[str] = set()
    if _DATE_WORDS.isdisjoint(words) and not _YEAR_RE.search(low):
        words = []  # the common case: nothing date-like, skip the scan
    for i, w in enumerate(words):
        if w in _MONTHS:
            near_digit = any(x.isdigit() for x in words[max(0, i - 1) : i + 2])
            if w != "may" or near_digit:  # "may" is a month only next to a number
                found.add(f"month:{_MONTHS[w]}")
        elif w.rstrip("s") in _WEEKDAYS:
            found.add(f"dow:{_WEEKDAYS[w.rstrip('s')]}")
        elif w in _EN_RELATIVE_DAYS:
            found.add(f"rel:{_EN_RELATIVE_DAYS[w]}")
        elif w in _EN_PERIODS and i and words[i - 1] in _EN_RELATIVE_SHIFT:
            found.add(f"rel:{w}{_EN_RELATIVE_SHIFT[words[i - 1]]}")
        elif len(w) == 4 and w.isdigit() and 1900 <= int(w) <= 2099:
            found.add(f"year:{w}")
    if "-" in low or "/" in low:
        for m in _NUMERIC_DATE_RE.finditer(low):
            found.add("date:" + "/".join(str(int(g)) for g in m.groups() if g))
    if has_cjk:
        for m in _ZH_DATE_RE.finditer(low):
            year, month, day, dow, rel = m.groups()
            if year:
                found.add(f"year:{_as_number(year)}")
            elif month:
                found.add(f"month:{_as_number(month)}")
            elif day:
                found.add(f"day:{_as_number(day)}")
            elif dow:
                found.add("rel:weekend0" if dow == "末" else
                          f"dow:{'一二三四五六日天'.index(dow) + 1 if dow != '天' else 7}")
            elif rel:
                found.add(f"rel:{_ZH_RELATIVE[rel]}")
    return frozenset(found)


@dataclass(slots=True)
class _Quantities:
    numbers: set[str]
    soft: set[str]
    units: list[tuple[int, str]]  # (position, canonical unit)
    pairs: set[tuple[str, str]]  # (number, unit) written together

    def add(self, low: str, value: str, end: int, soft: bool = False) -> None:
        (self.soft if soft else self.numbers).add(value)
        unit = _unit_after(low, end)
        if unit:
            self.units.append((end, unit))
            self.pairs.add((value, unit))


def _unit_after(low: str, end: int) -> str | None:
    m = _AFTER_RE.match(low, end)
    if not m:
        return None
    tok = m.group(1)
    if tok[0] < "\u3400":
        return _UNIT_OF.get(tok)
    tok = tok.removeprefix("个") if len(tok) > 1 else tok
    for size in (3, 2, 1):  # longest spelling first: 公里 before 公
        unit = _UNIT_OF.get(tok[:size]) or _UNIT_OF.get("个" + tok[:size])
        if unit:
            return unit
    return None


def _en_word_numbers(low: str, words: list[str], q: _Quantities) -> None:
    """Numbers written as words: "twenty five" -> 25, "two hundred" -> 200, "third" -> 3."""
    current: int | None = None
    if _NUMBER_WORDS.isdisjoint(words):
        return
    if "second" in low:
        low = _SECOND_UNIT_RE.sub(" sec", low)
    end = 0
    for m in [*_WORD_RE.finditer(low), None]:
        word = m.group(0) if m else ""
        if word in _EN_NUM_WORDS:
            current, end = (current or 0) + _EN_NUM_WORDS[word], m.end() if m else 0
            continue
        if word in _EN_SCALES and current is not None:
            current, end = current * _EN_SCALES[word], m.end() if m else 0
            continue
        if current is not None:
            q.add(low, str(current), end)
            current = None
        if word in _EN_ORDINALS:
            q.numbers.add(str(_EN_ORDINALS[word]))
        elif word in _SOFT_ONE_WORDS and m:
            q.add(low, "1", m.end(), soft=True)


def _digit_numbers(low: str, q: _Quantities) -> None:
    for m in _CURRENCY_PREFIX_RE.finditer(low):
        unit = _UNIT_OF[m.group(1).rstrip(".")]
        q.units.append((m.start(), unit))
        num = _NUM_RE.match(low, m.end())
        if num:
            q.pairs.add((_canon_number(num.group(1), num.group(2)), unit))
    for m in _NUM_RE.finditer(low):
        value, end = _canon_number(m.group(1), m.group(2)), m.end()
        if end < len(low) and low[end] in _ZH_BIG:  # 3万 -> 30000
            value = str(round(float(value) * _ZH_BIG[low[end]]))
            end += 1
        q.add(low, value, end)


def _zh_numbers(low: str, q: _Quantities) -> None:
    for m in _ZH_PERCENT_RE.finditer(low):
        value = _as_number(m.group(1)) if "." not in m.group(1) else m.group(1)
        q.numbers.add(value)
        q.units.append((m.start(), "%"))
        q.pairs.add((value, "%"))
    masked = _ZH_PERCENT_RE.sub(lambda m: "_" * len(m.group(0)), low)
    masked = _ZH_NOT_NUMBER_RE.sub(lambda m: "_" * len(m.group(0)), masked)
    for m in _ZH_NUM_RE.finditer(masked):
        if m.start() and masked[m.start() - 1].isdigit():
            continue  # the 万 of "3万", already counted
        q.add(low, _zh_number(m.group(0)), m.end(), soft=m.group(0) == "一")
    for m in _ZH_UNIT_ANY_RE.finditer(low):
        q.units.append((m.start(), _UNIT_OF[m.group(0)]))


def _unit_words(low: str, words: list[str], q: _Quantities) -> None:
    prev = ""
    scan = not _UNIT_WORDS.keys().isdisjoint(words) or "cent" in words
    for m in _WORD_RE.finditer(low) if scan else ():
        w = m.group(0)
        unit = _UNIT_WORDS.get(w)
        if unit is None and w == "cent" and prev == "per":
            unit = "%"
        if unit is not None:
            q.units.append((m.start(), unit))
        prev = w
    for m in _UNIT_SYMBOL_RE.finditer(low):
        q.units.append((m.start(), _UNIT_OF[m.group(0)]))
    if "how " not in low and "多少" not in low and "几" not in low:
        return
    for m in _HOW_MANY_UNIT_RE.finditer(low):
        spelling = m.group(1) or m.group(2)
        q.units.append((m.start(), _UNIT_OF.get(spelling) or _UNIT_OF.get("个" + spelling, "")))


def _extract_quantities(low: str, words: list[str], has_cjk: bool) -> _Quantities:
    """Numbers (digits, Chinese numerals, words), units and (number, unit) pairs."""
    q = _Quantities(set(), set(), [], set())
    if _DIGIT_RE.search(low):
        _digit_numbers(low, q)
    if has_cjk:
        _zh_numbers(low, q)
    _en_word_numbers(low, words, q)
    _unit_words(low, words, q)
    q.soft -= q.numbers
    q.units.sort()
    return q


def _count_negations(low: str, words: list[str], has_cjk: bool) -> int:
    count = sum(1 for w in words if w in _EN_NEGATIONS)
    if "or not" in low or "why not" in low:  # "is it real or not?" asks; it does not negate
        count -= len(_EN_NOT_QUESTION_RE.findall(low))
    if "n't" in low:
        count += len(_EN_NEG_RE.findall(low))
    if has_cjk:
        zh = _ZH_NOT_NEGATION_RE.sub("", _ZH_A_NOT_A_RE.sub("", low))
        count += sum(1 for c in zh if c in _ZH_NEG_CHARS)
    return count


def _at_sentence_start(text: str, pos: int) -> bool:
    pos -= 1
    while pos >= 0 and text[pos] in " \t\r'*-":
        pos -= 1
    return pos < 0 or text[pos] in _SENTENCE_ENDS


def _apply_aliases(text: str, low: str) -> str:
    if "US" not in text and not _ALIAS_CUE_RE.search(low):
        return text
    for pattern, canonical in _ALIASES:
        text = pattern.sub(canonical, text)
    return text


def _canon(key: str) -> str:
    return _DEMONYMS.get(key, key)


def _is_title_case(tokens: list[str]) -> bool:
    """Headline Style Capitalizes Common Words too; a sentence full of names does not."""
    long_words = [w for w in tokens[1:] if len(w) > 3]
    caps = [w for w in long_words if w[0].isupper()]
    return (len(long_words) >= 3 and len(caps) >= 0.8 * len(long_words)
            and any(w.casefold() in _EN_STOP for w in caps))


def _entity_spans(text: str, low: str) -> tuple[_Span, ...]:
    """Runs of name-like tokens. Strong evidence: lexicon names, acronyms, inner capitals
    (iPhone), multi-word names, a name after in/at/near/from/to. Weak: a lone capitalized
    word mid-sentence (skipped at a sentence start and in Title Case or SHOUTED text)."""
    matches = list(_TOKEN_RE.finditer(text))
    tokens = [m.group(0) for m in matches]
    upper = len(_UPPER_RE.findall(text))
    shouting = upper > 8 and upper > 0.6 * len(_ASCII_LETTER_RE.findall(text))
    title = shouting or (upper >= 3 and _is_title_case(tokens))
    spans: list[_Span] = []
    run: list[str] = []
    strong = False
    start = end = 0
    prev_word = ""
    for m, tok in zip(matches, tokens, strict=True):
        key = _stem(tok)
        kind = _entity_kind(tok, key, shouting, title, text, m.start())
        if kind and run and not text[end : m.start()].strip():
            run.append(_canon(key))  # "Walton County": one name
            strong, end = True, m.end()
        elif kind:
            if run:
                spans.append(_Span(tuple(run), strong, start, end))
            # A name after in/at/near, or listed with another name ("Venus, Saturn and Mars")
            listed = prev_word in _LIST_WORDS and bool(spans) and spans[-1].end >= m.start() - 6
            strong = kind == "strong" or prev_word in _NAME_PREPOSITIONS or listed
            run, start, end = [_canon(key)], m.start(), m.end()
        elif run:
            spans.append(_Span(tuple(run), strong, start, end))
            run = []
        prev_word = key
    if run:
        spans.append(_Span(tuple(run), strong, start, end))
    return tuple(spans)


def _entity_kind(tok: str, key: str, shouting: bool, title: bool, text: str,
                 pos: int) -> str | None:
    if key in _EN_ENTITIES or (not tok.isalpha() and tok.casefold() in _EN_ENTITIES):
        return "strong"
    if tok.islower() or shouting:
        return None
    if len(tok) > 1 and tok.isupper() and tok.isalpha() and key != "ok":
        return "strong"  # NASA, and IN / GA as state codes: mid-sentence capitals are not "in"
    if key in _CAP_STOP:
        return None
    if any(c.isupper() for c in tok[1:]):
        return "strong"  # iPhone, YouTube
    if tok[0].isupper() and not title and not _at_sentence_start(text, pos):
        return "weak"
    return None


def _direction(low: str, has_cjk: bool) -> tuple[frozenset[str], frozenset[str]] | None:
    """Content words just before and after the first directional word, if there is one."""
    m = _EN_DIRECTION_RE.search(low)
    if m and (m.group(1) != "to" or _EN_DIRECTION_CUE_RE.search(low)):
        left = [_stem(w) for w in _WORD_RE.findall(low[: m.start()])]
        right = [_stem(w) for w in _WORD_RE.findall(low[m.end() :])]
        return (frozenset([w for w in left if w not in _EN_STOP][-_DIRECTION_WINDOW:]),
                frozenset([w for w in right if w not in _EN_STOP][:_DIRECTION_WINDOW]))
    if has_cjk:
        m = _ZH_DIRECTION_RE.search(low)
        if m:
            left = [c for c in _zh_diff_units(low[: m.start()]) if c not in _ZH_FUNCTION]
            right = [c for c in _zh_diff_units(low[m.end() :]) if c not in _ZH_FUNCTION]
            return frozenset(left[-_DIRECTION_WINDOW:]), frozenset(right[:_DIRECTION_WINDOW])
    return None


def _genders(words: list[str], low: str, has_cjk: bool) -> tuple[str, ...]:
    found = [_EN_GENDER[w] for w in words if w in _EN_GENDER]
    if has_cjk:
        found += ["m" if m.group(1) else "f" for m in _ZH_GENDER_RE.finditer(low)]
    return tuple(g for i, g in enumerate(found) if i == 0 or found[i - 1] != g)


def _zh_entities(low: str) -> tuple[_Span, ...]:
    found = [e for e in _ZH_ENTITIES if e in low]
    # Keep the longest name at each place: 中国银行, not also 中国.
    kept = [e for e in found if not any(e != o and e in o for o in found)]
    return tuple(sorted((_Span((e,), True, low.find(e), low.find(e) + len(e)) for e in kept),
                        key=lambda sp: sp.start))


def _zh_diff_units(low: str) -> tuple[str, ...]:
    """The sequence the Chinese diff runs on: CJK characters and ASCII words, without
    numerals (the number check owns those) and without question-word synonyms."""
    for q in _ZH_QUESTIONS:
        low = low.replace(q, " ")
    return tuple(u for u in _ZH_DIFF_UNIT_RE.findall(low) if u not in _ZH_NUM_CHARS)


@lru_cache(maxsize=16384)
def _features(text: str) -> _Features:
    text = unicodedata.normalize("NFKC", text).replace("\u2019", "'")
    low = text.casefold()
    has_cjk = bool(_CJK_RE.search(low))
    words = _WORD_RE.findall(low)
    q = _extract_quantities(low, words, has_cjk)
    order = tuple(dict.fromkeys(unit for _, unit in q.units))
    tokens = _TOKEN_RE.findall(text)  # as written, for the identifier casing check
    entity_text = _apply_aliases(text, low)
    return _Features(
        identifiers=_extract_identifiers(text),
        dates=_extract_dates(low, words, has_cjk),
        units=frozenset(order),
        unit_order=order,
        quantities=frozenset(q.pairs),
        numbers=frozenset(q.numbers),
        soft_numbers=frozenset(q.soft),
        negations=_count_negations(low, words, has_cjk),
        words=frozenset(_canon(_stem(t)) for t in (
            tokens if entity_text is text else (*tokens, *_TOKEN_RE.findall(entity_text)))),
        tokens=frozenset(t.casefold() for t in tokens),
        direction=_direction(low, has_cjk),
        genders=_genders(words, low, has_cjk),
        entity_text=entity_text,
        entity_spans=_entity_spans(entity_text, low),
        zh_text=low if has_cjk else "",
        zh_entities=_zh_entities(low) if has_cjk else (),
        zh_units=_zh_diff_units(low) if has_cjk else (),
    )


# ---------------------------------------------------------------- checks


def _identifier(a: _Features, b: _Features) -> str | None:
    # "JavaScript" is an identifier by its shape; "javascript" on the other side is the
    # same word in other casing, not another identifier.
    for mine, other in ((a.identifiers - b.identifiers, b), (b.identifiers - a.identifiers, a)):
        if any(ident not in other.tokens for ident in mine):
            return "identifier"
    return None


def _date(a: _Features, b: _Features) -> str | None:
    return "date" if a.dates != b.dates else None


def _unit(a: _Features, b: _Features) -> str | None:
    if a.units != b.units:
        return "unit"
    # Same units, other direction: "5 km in miles" vs "5 miles in km".
    if a.quantities != b.quantities and a.numbers == b.numbers:
        return "unit"
    if len(a.unit_order) > 1 and a.unit_order != b.unit_order:
        return "unit"
    return None


def _number(a: _Features, b: _Features) -> str | None:
    if a.numbers == b.numbers:
        return None
    # "one" / "一" on one side and nothing on the other is the article "a", not a number.
    only_a = a.numbers - b.numbers - b.soft_numbers
    only_b = b.numbers - a.numbers - a.soft_numbers
    return "number" if only_a or only_b else None


def _negation(a: _Features, b: _Features) -> str | None:
    return "negation" if a.negations != b.negations else None


def _antonym(a: _Features, b: _Features) -> str | None:
    only_a, only_b = a.words - b.words, b.words - a.words
    if only_a and only_b:
        for x, y in _EN_ANTONYM_PAIRS:
            if (x in only_a and y in only_b) or (y in only_a and x in only_b):
                return "antonym"
    # "install" / "uninstall", "like" / "dislike", "valid" / "invalid"
    for mine, other in ((only_a, only_b), (only_b, only_a)):
        for w in mine:
            if len(w) >= 4 and any(p + w in other for p in _EN_NEG_PREFIXES):
                return "negation"
    if a.zh_text and b.zh_text:
        for x, y in _ZH_ANTONYMS:
            ax, ay, bx, by = x in a.zh_text, y in a.zh_text, x in b.zh_text, y in b.zh_text
            if (ax and not ay and by and not bx) or (ay and not ax and bx and not by):
                return "antonym"
    return None


def _entity(a: _Features, b: _Features) -> str | None:
    if {sp.key for sp in a.zh_entities} != {sp.key for sp in b.zh_entities}:
        return "entity"
    if a.genders and b.genders and a.genders != b.genders:  # men vs women, 他爱她 vs 她爱他
        return "entity"
    unmatched_a = [t for sp in a.entity_spans for t in sp.tokens if t not in b.words]
    unmatched_b = [t for sp in b.entity_spans for t in sp.tokens if t not in a.words]
    if unmatched_a and unmatched_b:  # a swap: Walton County vs Washington County
        return "entity"
    # An added name is another question ("weather" vs "weather in Paris") unless it
    # qualifies a name both share ("Trump" vs "Donald Trump", "Cairo, Egypt", "Near Death
    # Experiences (NDEs)"), or is only a capitalized word.
    for f, other in ((a, b.words), (b, a.words)):
        prev: _Span | None = None
        for sp in f.entity_spans:
            added = sp.strong and all(t not in other for t in sp.tokens)
            if added and not _qualifies(prev, sp, f.entity_text, other):
                return "entity"
            prev = sp
    return None


def _qualifies(prev: _Span | None, sp: _Span, text: str, other: frozenset[str]) -> bool:
    return (prev is not None and any(t in other for t in prev.tokens)
            and text[prev.end : sp.start].strip() in {",", "(", "-", ""})


def _first_inversion(a: tuple[_Span, ...], b: tuple[_Span, ...]) -> tuple[_Span, _Span] | None:
    """Two names that come in one order in `a` and in the other order in `b`."""
    pos_b: dict[str, int] = {}
    for i, sp in enumerate(b):
        pos_b.setdefault(sp.key, i)
    firsts: dict[str, _Span] = {}
    for sp in a:
        firsts.setdefault(sp.key, sp)
    names = list(firsts.values())
    for i, x in enumerate(names):
        for y in names[i + 1 :]:
            if x.key in pos_b and y.key in pos_b and pos_b[y.key] < pos_b[x.key]:
                return x, y
    return None


def _order(a: _Features, b: _Features) -> str | None:
    """Same names, other roles: "Indian women like Pakistani men" vs the reverse,
    "北京到上海" vs "上海到北京". Swapping around "and" / "vs" / "和" keeps the meaning."""
    for spans_a, spans_b, text in ((a.entity_spans, b.entity_spans, a.entity_text),
                                   (a.zh_entities, b.zh_entities, a.zh_text)):
        if len(spans_a) < 2 or {s.key for s in spans_a} != {s.key for s in spans_b}:
            continue
        pair = _first_inversion(spans_a, spans_b)
        if pair and not _JOINER_RE.fullmatch(text[pair[0].end : pair[1].start]):
            return "order"
    # "convert ethanol to acid" vs "convert acid to ethanol": the two sides trade places.
    if a.direction and b.direction:
        (left_a, right_a), (left_b, right_b) = a.direction, b.direction
        if (left_a & right_b) - (left_a & left_b) and (right_a & left_b) - (right_a & right_b):
            return "order"
    return None


def _content(units: tuple[str, ...]) -> list[str]:
    return [u for u in units if u not in _ZH_FUNCTION]


def _zh_swap(a: _Features, b: _Features) -> str | None:
    """A Chinese word replaced by another ("北京" -> "上海", "猫" -> "狗"): a diff span whose
    two sides both hold content characters that the other text has fewer of. Counting, not
    mere presence, tells a move ("北京今天" / "今天北京") from a swap that reuses a character
    found elsewhere ("后患的患" / "后患的免")."""
    if not (a.zh_units and b.zh_units) or max(len(a.zh_units), len(b.zh_units)) > 300:
        return None
    count_a, count_b = Counter(a.zh_units), Counter(b.zh_units)
    ops = SequenceMatcher(None, a.zh_units, b.zh_units, autojunk=False).get_opcodes()
    for tag, i1, i2, j1, j2 in ops:
        if tag != "replace":
            continue
        left = [u for u in _content(a.zh_units[i1:i2]) if count_a[u] > count_b[u]]
        right = [u for u in _content(b.zh_units[j1:j2]) if count_b[u] > count_a[u]]
        if left and right:
            return "entity"
    return _zh_pronoun_order(a, b)


def _zh_pronoun_order(a: _Features, b: _Features) -> str | None:
    """"她说我爱她" / "我说她爱我": the same people in other roles."""
    pa = [u for u in a.zh_units if u in _ZH_PERSONS]
    pb = [u for u in b.zh_units if u in _ZH_PERSONS]
    return "order" if len(set(pa)) > 1 and set(pa) == set(pb) and pa != pb else None


_EN_ANTONYM_PAIRS = frozenset((_stem(x), _stem(y)) for x, y in _EN_ANTONYMS)
_CHECKS = (_identifier, _date, _unit, _number, _negation, _antonym, _entity, _order, _zh_swap)


def near_miss(query: str, cached: str) -> str | None:
    """Why `cached`'s answer must not be served for `query`, or None if nothing forbids it.

    Reasons: "identifier", "date", "unit", "number", "negation", "antonym", "entity",
    "order" (the same names in swapped roles).
    Symmetric; cheap enough to run on every candidate above the similarity threshold.
    """
    if query == cached:
        return None
    a, b = _features(query), _features(cached)
    for check in _CHECKS:
        reason = check(a, b)
        if reason is not None:
            return reason
    return None


def content_difference(query: str, cached: str) -> int:
    """How many content words (English) or content characters (Chinese) one text has and
    the other lacks: a lexical second opinion for a hit close to the threshold."""
    a, b = _features(query), _features(cached)
    words = {w for w in a.words ^ b.words if w not in _EN_STOP and w.isalpha() and len(w) > 1}
    chars = set(_content(a.zh_units)) ^ set(_content(b.zh_units))
    return len(words) + sum(1 for c in chars if not c.isascii())
