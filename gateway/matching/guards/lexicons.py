"""Hand-written word lists and tables the guards look words up in.

Numerals (Chinese and English number words), units and their spellings, negations, English
and Chinese antonym pairs, Chinese function characters, gendered words, entity names (places,
companies, products, languages, people; English and Chinese), demonyms, stop words, the
aliases folded before names are compared, and month, weekday and relative-date words. Short
on purpose: an entity missing here is still caught by capitalization (English) or by the
character diff (Chinese). Data only; the patterns built from it live in `patterns`.
"""

from __future__ import annotations

import re


def _words(block: str) -> list[str]:
    return block.split()


_ZH_DIGITS = {
    "零": 0,
    "\u3007": 0,
    "一": 1,
    "二": 2,
    "两": 2,
    "俩": 2,
    "三": 3,
    "四": 4,
    "五": 5,
    "六": 6,
    "七": 7,
    "八": 8,
    "九": 9,
}
_ZH_SMALL = {"十": 10, "百": 100, "千": 1000}
_ZH_BIG = {"万": 10_000, "亿": 100_000_000}
_ZH_NUM_CHARS = "".join([*_ZH_DIGITS, *_ZH_SMALL, *_ZH_BIG])

_EN_NUM_WORDS = {
    "zero": 0,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "thirteen": 13,
    "fourteen": 14,
    "fifteen": 15,
    "sixteen": 16,
    "seventeen": 17,
    "eighteen": 18,
    "nineteen": 19,
    "twenty": 20,
    "thirty": 30,
    "forty": 40,
    "fifty": 50,
    "sixty": 60,
    "seventy": 70,
    "eighty": 80,
    "ninety": 90,
    "dozen": 12,
    "twenties": 20,
    "thirties": 30,
    "forties": 40,
    "fifties": 50,
    "sixties": 60,
    "seventies": 70,
    "eighties": 80,
    "nineties": 90,
}
_EN_SCALES = {
    "hundred": 100,
    "thousand": 1000,
    "million": 10**6,
    "billion": 10**9,
    "trillion": 10**12,
}
_EN_ORDINALS = {
    "second": 2,
    "third": 3,
    "fourth": 4,
    "fifth": 5,
    "sixth": 6,
    "seventh": 7,
    "eighth": 8,
    "ninth": 9,
    "tenth": 10,
    "eleventh": 11,
    "twelfth": 12,
}
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
_UNIT_SHORT = {
    "m",
    "g",
    "s",
    "h",
    "l",
    "t",
    "b",
    "v",
    "w",
    "c",
    "f",
    "min",
    "bit",
    "bits",
    "米",
    "克",
    "升",
    "吨",
    "度",
    "天",
    "日",
    "周",
    "年",
    "元",
    "块",
    "秒",
    "兆",
    "瓦",
    "伏",
    "码",
    "斤",
    "星期",
    "礼拜",
    "rs",
    "day",
    "days",
    "week",
    "weeks",
    "month",
    "months",
    "year",
    "years",
    "yr",
    "yrs",
    "hour",
    "hours",
    "minute",
    "minutes",
    "mins",
    "sec",
    "secs",
    "cup",
    "cups",
}

_EN_NEGATIONS = {
    "not",
    "no",
    "never",
    "cannot",
    "without",
    "none",
    "nobody",
    "nothing",
    "nowhere",
    "neither",
    "nor",
    "unable",
    "impossible",
    "dont",
    "doesnt",
    "didnt",
    "cant",
    "wont",
    "isnt",
    "arent",
    "wasnt",
    "werent",
    "shouldnt",
    "wouldnt",
    "couldnt",
    "havent",
    "hasnt",
    "hadnt",
    "aint",
    "mustnt",
}

# Antonyms that an embedding barely separates. Pairs of words, each a canonical key.
_EN_ANTONYMS = [
    ("enable", "disable"),
    ("enabled", "disabled"),
    ("increase", "decrease"),
    ("max", "min"),
    ("maximum", "minimum"),
    ("before", "after"),
    ("more", "less"),
    ("most", "least"),
    ("best", "worst"),
    ("better", "worse"),
    ("buy", "sell"),
    ("win", "lose"),
    ("pros", "cons"),
    ("advantage", "disadvantage"),
    ("upload", "download"),
    ("import", "export"),
    ("start", "stop"),
    ("open", "close"),
    ("add", "remove"),
    ("include", "exclude"),
    ("encrypt", "decrypt"),
    ("encode", "decode"),
    ("login", "logout"),
    ("push", "pull"),
    ("inside", "outside"),
    ("above", "below"),
    ("high", "low"),
    ("higher", "lower"),
    ("highest", "lowest"),
    ("fast", "slow"),
    ("faster", "slower"),
    ("cheap", "expensive"),
    ("hot", "cold"),
    ("true", "false"),
    ("left", "right"),
    ("north", "south"),
    ("east", "west"),
    ("positive", "negative"),
    ("love", "hate"),
    ("accept", "reject"),
    ("allow", "deny"),
    ("allow", "block"),
    ("show", "hide"),
    ("visible", "hidden"),
    ("connect", "disconnect"),
    ("lock", "unlock"),
    ("big", "small"),
    ("bigger", "smaller"),
    ("biggest", "smallest"),
    ("large", "small"),
    ("largest", "smallest"),
    ("long", "short"),
    ("longer", "shorter"),
    ("old", "new"),
    ("older", "newer"),
    ("oldest", "newest"),
    ("first", "last"),
    ("early", "late"),
    ("earliest", "latest"),
    ("rich", "poor"),
    ("strong", "weak"),
    ("heavy", "light"),
    ("easy", "hard"),
    ("easiest", "hardest"),
    ("good", "bad"),
    ("men", "women"),
    ("male", "female"),
    ("boy", "girl"),
    ("husband", "wife"),
    ("import", "export"),
    ("ascending", "descending"),
    ("asc", "desc"),
    ("sync", "async"),
    ("synchronous", "asynchronous"),
    ("client", "server"),
    ("frontend", "backend"),
    ("input", "output"),
    ("read", "write"),
    ("get", "set"),
    ("send", "receive"),
    ("up", "down"),
    ("in", "out"),
    ("on", "off"),
    ("yes", "no"),
    ("always", "never"),
    ("everyone", "nobody"),
    ("all", "none"),
    ("legal", "illegal"),
    ("gain", "lose"),
    ("gain", "loss"),
    ("profit", "loss"),
    ("income", "expense"),
    ("similar", "different"),
    ("same", "different"),
    ("similar", "differ"),
    ("similarity", "difference"),
    ("give", "receive"),
    ("given", "received"),
    ("gave", "received"),
    ("fully", "partially"),
    ("full", "partial"),
    ("credit", "debit"),
    ("deposit", "withdraw"),
    ("import", "export"),
    ("uppercase", "lowercase"),
    ("horizontal", "vertical"),
    ("horizontally", "vertically"),
    ("row", "column"),
    ("rows", "columns"),
]
_EN_NEG_PREFIXES = ("un", "dis", "in", "im", "il", "ir", "non", "non-", "de", "anti")

_ZH_ANTONYMS = [
    ("打开", "关闭"),
    ("开启", "关闭"),
    ("开通", "关闭"),
    ("开通", "取消"),
    ("开启", "禁用"),
    ("启用", "禁用"),
    ("增加", "减少"),
    ("提高", "降低"),
    ("提升", "降低"),
    ("上升", "下降"),
    ("上涨", "下跌"),
    ("买入", "卖出"),
    ("购买", "出售"),
    ("最大", "最小"),
    ("最多", "最少"),
    ("最高", "最低"),
    ("最好", "最差"),
    ("最快", "最慢"),
    ("最贵", "最便宜"),
    ("优点", "缺点"),
    ("好处", "坏处"),
    ("之前", "之后"),
    ("以前", "以后"),
    ("上传", "下载"),
    ("登录", "退出"),
    ("登录", "注销"),
    ("加入", "退出"),
    ("安装", "卸载"),
    ("开始", "结束"),
    ("成功", "失败"),
    ("正确", "错误"),
    ("允许", "禁止"),
    ("显示", "隐藏"),
    ("男", "女"),
    ("加密", "解密"),
    ("导入", "导出"),
    ("收入", "支出"),
    ("存款", "取款"),
    ("存钱", "取钱"),
    ("充值", "提现"),
    ("升级", "降级"),
    ("绑定", "解绑"),
    ("冻结", "解冻"),
    ("锁定", "解锁"),
    ("借", "还"),
    ("早上", "晚上"),
    ("上午", "下午"),
    ("白天", "晚上"),
    ("冷", "热"),
    ("涨", "跌"),
    ("多", "少"),
    ("大", "小"),
    ("高", "低"),
    ("快", "慢"),
    ("长", "短"),
    ("贵", "便宜"),
    ("胖", "瘦"),
    ("新", "旧"),
    ("前", "后"),
    ("左", "右"),
    ("东", "西"),
    ("南", "北"),
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
    **dict.fromkeys(
        _words("""he him his himself man men boy boys guy guys male males husband
                    husbands boyfriend boyfriends father son sons brother"""),
        "m",
    ),
    **dict.fromkeys(
        _words("""she her hers herself woman women girl girls female females wife
                    wives girlfriend girlfriends mother daughter daughters sister"""),
        "f",
    ),
}
_ZH_GENDER_RE = re.compile("(男|老公|丈夫|儿子)|(女|老婆|妻子)")
_ZH_QUESTIONS = ("怎么样", "怎么办", "怎样", "怎么", "如何", "什么", "为什么", "为啥", "咋")

# Entity lexicons: common, unambiguous names. Capitalization catches the rest in English.
_EN_ENTITIES = frozenset(
    _words("""
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
""")
)

_ZH_ENTITIES = tuple(
    _words("""
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
""")
)

# A people and its country are one name for matching: "Indians" ~ "India".
_DEMONYMS = {
    "indian": "india",
    "chinese": "china",
    "american": "usa",
    "british": "uk",
    "french": "france",
    "german": "germany",
    "japanese": "japan",
    "korean": "korea",
    "russian": "russia",
    "spanish": "spain",
    "italian": "italy",
    "canadian": "canada",
    "mexican": "mexico",
    "brazilian": "brazil",
    "pakistani": "pakistan",
    "african": "africa",
    "european": "europe",
    "asian": "asia",
    "australian": "australia",
    "israeli": "israel",
    "iranian": "iran",
    "turkish": "turkey",
    "greek": "greece",
    "dutch": "netherlands",
    "swedish": "sweden",
    "filipino": "philippines",
    "vietnamese": "vietnam",
    "thai": "thailand",
    "egyptian": "egypt",
    "nigerian": "nigeria",
    "nepali": "nepal",
    "bangladeshi": "bangladesh",
    "irish": "ireland",
    "polish": "poland",
    "portuguese": "portugal",
    "ukrainian": "ukraine",
    "swiss": "switzerland",
}

# Capitalized words that are not names (sentence-initial words are skipped anyway).
_CAP_STOP = frozenset(
    _words("""
i i'm i've i'd i'll im ive ok okay mr mrs ms dr sir madam please hi hello hey thanks thank
dear god lord q a what how why who when where which is are do does can could should would
will the an in on of for to and or but if
""")
)

_EN_STOP = frozenset(
    _words("""
a an the is are was were be been being am do does did doing have has had having can could
should would will shall may might must i me my mine myself we us our you your yours he him
his she her it its they them their this that these those there here what which who whom
whose why how when where whats hows whys wheres whos to of in on at by for with from about as
into onto over under than then so and or but if because while also too very really just
quite some any each every all both either such only own same other another more most much
many few lot lots get got getting make makes made go going way ways thing things one ones
someone something anyone anything people person best good better need needs want wants like
know tell please possible possibly actually exactly ever else kind sort use used using
""")
)

# Aliases folded before entity comparison, only when a cue is in the text (it rarely is).
_ALIAS_CUE_RE = re.compile(r"united|u\.[sk]\.|america|britain|nyc|york city|hong kong")
_ALIASES = [
    (
        re.compile(
            r"\b(?:united states of america|united states|u\.s\.a\b\.?|u\.s\.|america)(?!n)", re.I
        ),
        "USA",
    ),
    (re.compile(r"\bUS\b"), "USA"),
    (re.compile(r"\b(?:united kingdom|great britain|britain|u\.k\.)", re.I), "UK"),
    (re.compile(r"\b(?:new york city|nyc)\b", re.I), "New York"),
    (re.compile(r"\bhong kong\b", re.I), "Hongkong"),
]

# Dates: month and weekday names, relative days and periods.
_MONTHS = {
    m: i
    for i, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march",),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december",),
        ],
        1,
    )
    for m in names
}
_WEEKDAYS = {
    d: i
    for i, names in enumerate(
        [
            ("monday",),
            ("tuesday", "tues"),
            ("wednesday",),
            ("thursday", "thurs"),
            ("friday",),
            ("saturday",),
            ("sunday",),
        ],
        1,
    )
    for d in names
}
_EN_RELATIVE_DAYS = {"today": "d0", "tonight": "d0", "tomorrow": "d+1", "yesterday": "d-1"}
_EN_RELATIVE_SHIFT = {"this": "0", "next": "+1", "last": "-1", "coming": "+1", "past": "-1"}
_EN_PERIODS = {"week", "month", "year", "weekend", "quarter"}
_DATE_WORDS = frozenset(
    [*_MONTHS, *_WEEKDAYS, *(d + "s" for d in _WEEKDAYS), *_EN_RELATIVE_DAYS, *_EN_PERIODS]
)
_ZH_RELATIVE = {
    "今天": "d0",
    "今日": "d0",
    "今晚": "d0",
    "明天": "d+1",
    "明日": "d+1",
    "昨天": "d-1",
    "昨日": "d-1",
    "后天": "d+2",
    "前天": "d-2",
    "大后天": "d+3",
    "大前天": "d-3",
    "本周": "week0",
    "这周": "week0",
    "这个星期": "week0",
    "下周": "week+1",
    "下个星期": "week+1",
    "上周": "week-1",
    "上个星期": "week-1",
    "本月": "month0",
    "这个月": "month0",
    "下个月": "month+1",
    "上个月": "month-1",
    "今年": "year0",
    "明年": "year+1",
    "去年": "year-1",
    "前年": "year-2",
    "后年": "year+2",
    "周末": "weekend0",
}
